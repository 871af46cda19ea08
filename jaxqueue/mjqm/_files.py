"""MJQM workload files: one TOML or JSON file describes one :class:`Workload` (Poisson arrivals).
``servers`` (int >= 1), optional ``name`` (default: the file name without suffix), ``classes``
(tables, TOML ``[[classes]]``), each with ``cores`` (int in ``[1, servers]``), ``prob`` (>= 0,
summing to 1 within 1e-9) and ``law``, a family of :func:`jaxqueue.dist.law_families` with its
fields. No other key; integers as integers (``2``, not ``2.0``). Errors name the file and the
field: ``wl.toml: classes[2].law: unknown law 'gamma'; choose one of exponential, ...``.

Example (``examples/workloads/five-class-exp.toml`` writes out a whole preset)::

    name = "two-class"
    servers = 20
    [[classes]]
    cores = 1
    prob = 0.9
    law = "exponential"
    mean = 1.0
    [[classes]]
    cores = 10
    prob = 0.1
    law = "hyperexponential"
    probs = [0.01, 0.99]
    means = [100.0, 1.0101]

The same in JSON: ``{"name": "two-class", "servers": 20, "classes": [...]}``.
"""

from __future__ import annotations

import pathlib

import numpy as np

from .._document import (
    FieldError,
    check_keys,
    in_file,
    integer,
    parse_file,
    probability,
    shown,
    sums_to_one,
    type_name,
)
from ..dist import law_families, law_fields, law_from_fields
from ._workload import Workload

_TOP_KEYS = ("servers", "classes")
_CLASS_KEYS = ("cores", "prob", "law")


def _law_name(c: dict, where: str) -> str:
    families = law_families()
    if "law" not in c:
        raise FieldError(f"{where}law", f"missing; choose one of {', '.join(families)}")
    law = c["law"]
    if not isinstance(law, str):
        raise FieldError(f"{where}law", f"must be a string, got {type_name(law)} {shown(law)}")
    if law not in families:
        raise FieldError(f"{where}law", f"unknown law {law!r}; choose one of {', '.join(families)}")
    return law


def _class(c, i: int, servers: int):
    """``(cores, prob, law)`` of ``classes[i]``."""
    where = f"classes[{i}]."
    if not isinstance(c, dict):
        raise FieldError(f"classes[{i}]", f"must be a table, got {type_name(c)} {shown(c)}")
    law = _law_name(c, where)
    check_keys(c, _CLASS_KEYS + law_fields(law), (), where, f"a class of law {law!r}")
    cores = integer(c["cores"], f"{where}cores")
    if cores > servers:
        raise FieldError(f"{where}cores", f"{cores} exceeds servers ({servers})")
    return cores, probability(c["prob"], f"{where}prob"), law_from_fields(law, c, where)


def workload_from_dict(spec, default_name: str = "") -> Workload:
    """The :class:`Workload` of a parsed file (see the module docstring).

    Raises:
        ValueError: ``"FIELD: what is wrong"`` (one line).
    """
    if not isinstance(spec, dict):
        raise FieldError("top level", f"must be a table (JSON object), got {type_name(spec)}")
    check_keys(spec, _TOP_KEYS, ("name",), "", "the top level")
    servers = integer(spec["servers"], "servers")
    name = spec.get("name", default_name)
    if not isinstance(name, str):
        raise FieldError("name", f"must be a string, got {type_name(name)} {shown(name)}")
    classes = spec["classes"]
    if not isinstance(classes, list):
        raise FieldError("classes", f"must be an array of tables, got {type_name(classes)}")
    if not classes:
        raise FieldError("classes", "empty; give at least one class ([[classes]] in TOML)")
    parsed = [_class(c, i, servers) for i, c in enumerate(classes)]
    cores, probs, services = map(list, zip(*parsed, strict=True))
    sums_to_one(probs, "classes[*].prob")
    return Workload(servers, cores, np.array(probs), services, name=name)


def load_workload(path) -> Workload:
    """The :class:`Workload` described by the TOML or JSON file ``path``.

    Raises:
        ValueError: one line ``"PATH: FIELD: what is wrong"`` (or ``"PATH: no such file"``,
            ``"PATH: invalid TOML: ... (at line L, column C)"``, ...).

    Examples:
        >>> w = load_workload("examples/workloads/five-class-exp.toml")  # doctest: +SKIP
        >>> w.servers, w.n_classes
        ((20,), 5)
    """
    with in_file(path, "workload"):
        return workload_from_dict(parse_file(path), default_name=pathlib.Path(path).stem)
