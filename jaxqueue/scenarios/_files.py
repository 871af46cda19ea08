"""Multiserver-job workloads read from TOML or JSON files (``scenarios.get("my-cluster.toml")``).

Schema (one file describes one :class:`jaxqueue.mjqm.Workload`, Poisson arrivals):

* ``servers``: int >= 1, the number of servers ``s``;
* ``name``: optional string, the workload's label (default: the file name without suffix);
* ``classes``: a non-empty list of tables (TOML ``[[classes]]``), in the order of the
  workload's classes, each with

  - ``cores``: int in ``[1, servers]``;
  - ``prob``: float >= 0; the ``prob`` of all classes sum to 1 (within 1e-9);
  - ``law``: the service-time law and its parameters (all finite; means > 0):

    =====================  =========================================================
    ``exponential``        ``mean``
    ``erlang``             ``mean``, ``k`` (int >= 1, the number of phases)
    ``hyperexponential``   ``probs``, ``means`` (lists of one length; probs sum to 1)
    ``bounded-pareto``     ``xmin``, ``xmax`` (> xmin), ``shape`` (> 0)
    ``deterministic``      ``value``
    =====================  =========================================================

No other key is allowed. Integers must be written as integers (``2``, not ``2.0``); floats may
be written as integers. A ``.toml`` file is read as TOML, a ``.json`` file as JSON, any other
file as JSON and else TOML. Every error is one ``ValueError`` line naming the file and the
field, e.g. ``wl.toml: classes[2].law: unknown law 'gamma'; choose one of exponential, ...``
(``classes[i]`` counts from 0).

Example (``examples/workloads/five-class-exp.toml`` writes out the whole ``five-class-exp``
preset this way)::

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

The same in JSON: ``{"name": "two-class", "servers": 20, "classes": [{"cores": 1, "prob":
0.9, "law": "exponential", "mean": 1.0}, {...}]}``.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import tomllib

import numpy as np

from ..dist import BoundedPareto, Deterministic, Erlang, Exponential, HyperExponential
from ..mjqm import Workload

__all__ = ["is_path", "load", "workload_from_dict"]

_TOP_KEYS = ("servers", "classes")
_CLASS_KEYS = ("cores", "prob", "law")
_PROB_TOL = 1e-9


class _Invalid(ValueError):
    """A bad field: ``field`` (e.g. ``classes[2].mean``) and what is wrong with it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


class _DuplicateKey(ValueError):
    pass


# ------------------------------------------------------------------ paths and parsing
def is_path(name) -> bool:
    """Whether ``name`` designates a file: a path object, a string with a path separator or
    a ``.toml`` / ``.json`` suffix, or the name of an existing file."""
    if isinstance(name, os.PathLike):
        return True
    if not isinstance(name, str):
        return False
    seps = (os.sep, os.altsep or os.sep)
    return (
        any(s in name for s in seps)
        or name.lower().endswith((".toml", ".json"))
        or os.path.exists(name)
    )


def _one_line(text) -> str:
    return " ".join(str(text).splitlines())


def _read_text(path: pathlib.Path) -> str:
    if not path.exists():
        raise ValueError("no such file")
    if path.is_dir():
        raise ValueError("is a directory, not a file")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read the file ({err.strerror or err})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"not UTF-8 text (bad byte at offset {err.start})") from None


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"duplicate key {key!r}")
        out[key] = value
    return out


def _parse_json(text: str):
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as err:
        raise _Invalid(
            "invalid JSON", f"{err.msg} at line {err.lineno}, column {err.colno}"
        ) from None
    except _DuplicateKey as err:
        raise _Invalid("invalid JSON", str(err)) from None
    except RecursionError:
        raise _Invalid("invalid JSON", "nested too deeply") from None


def _parse_toml(text: str):
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise _Invalid("invalid TOML", _one_line(err)) from None
    except RecursionError:
        raise _Invalid("invalid TOML", "nested too deeply") from None


def _parse(path: pathlib.Path, text: str):
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return _parse_toml(text)
    if suffix == ".json":
        return _parse_json(text)
    try:
        return _parse_json(text)
    except _Invalid as json_err:
        try:
            return _parse_toml(text)
        except _Invalid as toml_err:
            raise ValueError(
                f"neither valid JSON ({json_err.message}) nor valid TOML ({toml_err.message})"
            ) from None


# ------------------------------------------------------------------ typed fields
_TYPE_NAMES = {str: "string", bool: "boolean", int: "integer", float: "float", list: "array"}


def _shown(value) -> str:
    """``value`` as written in the file (``true``, not ``True``), cut to 60 characters."""
    text = json.dumps(value) if isinstance(value, bool) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(value) -> str:
    if isinstance(value, dict):
        return "table"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _integer(value, field: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(field, f"must be an integer, got {_type_name(value)} {_shown(value)}")
    if value < minimum:
        raise _Invalid(field, f"must be >= {minimum}, got {value}")
    return value


def _number(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid(field, f"must be a number, got {_type_name(value)} {_shown(value)}")
    try:
        x = float(value)
    except OverflowError:
        x = math.inf
    if not math.isfinite(x):
        raise _Invalid(field, f"must be finite, got {value!r}")
    return x


def _positive(value, field: str) -> float:
    x = _number(value, field)
    if x <= 0:
        raise _Invalid(field, f"must be > 0, got {value!r}")
    return x


def _probability(value, field: str) -> float:
    x = _number(value, field)
    if x < 0:
        raise _Invalid(field, f"must be >= 0, got {value!r}")
    return x


def _sums_to_one(probs, field: str) -> None:
    total = math.fsum(probs)
    if abs(total - 1.0) > _PROB_TOL:
        raise _Invalid(field, f"the probabilities sum to {total!r}, not 1 (tolerance 1e-9)")


def _vector(value, field: str, element) -> list[float]:
    if not isinstance(value, list):
        raise _Invalid(
            field, f"must be an array of numbers, got {_type_name(value)} {_shown(value)}"
        )
    if not value:
        raise _Invalid(field, "must not be empty")
    return [element(v, f"{field}[{i}]") for i, v in enumerate(value)]


def _check_keys(table: dict, required, optional, where: str, context: str) -> None:
    """No key outside ``required + optional`` (``context``: where the keys belong), none of
    ``required`` missing."""
    allowed = (*required, *optional)
    for key in table:
        if key not in allowed:
            hint = "; arrivals are always Poisson" if key == "arrival" and not where else ""
            raise _Invalid(
                f"{where}{key}", f"unknown key ({context} takes {', '.join(allowed)}){hint}"
            )
    for key in required:
        if key not in table:
            raise _Invalid(f"{where}{key}", f"missing ({context} needs {', '.join(required)})")


# ------------------------------------------------------------------ one function per law
def _exponential(c: dict, where: str) -> Exponential:
    return Exponential(_positive(c["mean"], f"{where}mean"))


def _erlang(c: dict, where: str) -> Erlang:
    return Erlang(_integer(c["k"], f"{where}k"), _positive(c["mean"], f"{where}mean"))


def _hyperexponential(c: dict, where: str) -> HyperExponential:
    probs = _vector(c["probs"], f"{where}probs", _probability)
    means = _vector(c["means"], f"{where}means", _positive)
    if len(probs) != len(means):
        raise _Invalid(
            f"{where}means",
            f"has {len(means)} entries but probs has {len(probs)}; give one mean per phase",
        )
    _sums_to_one(probs, f"{where}probs")
    return HyperExponential(np.array(means), np.array(probs))


def _bounded_pareto(c: dict, where: str) -> BoundedPareto:
    xmin = _positive(c["xmin"], f"{where}xmin")
    xmax = _positive(c["xmax"], f"{where}xmax")
    shape = _positive(c["shape"], f"{where}shape")
    if not xmax > xmin:
        raise _Invalid(f"{where}xmax", f"must be > xmin, got xmin {xmin!r} and xmax {xmax!r}")
    return BoundedPareto(xmin, xmax, shape)


def _deterministic(c: dict, where: str) -> Deterministic:
    return Deterministic(_positive(c["value"], f"{where}value"))


_LAWS = {
    "exponential": (("mean",), _exponential),
    "erlang": (("mean", "k"), _erlang),
    "hyperexponential": (("probs", "means"), _hyperexponential),
    "bounded-pareto": (("xmin", "xmax", "shape"), _bounded_pareto),
    "deterministic": (("value",), _deterministic),
}


# ------------------------------------------------------------------ tables
def _law_name(c: dict, where: str) -> str:
    if "law" not in c:
        raise _Invalid(f"{where}law", f"missing; choose one of {', '.join(_LAWS)}")
    law = c["law"]
    if not isinstance(law, str):
        raise _Invalid(f"{where}law", f"must be a string, got {_type_name(law)} {_shown(law)}")
    if law not in _LAWS:
        raise _Invalid(f"{where}law", f"unknown law {law!r}; choose one of {', '.join(_LAWS)}")
    return law


def _class(c, i: int, servers: int):
    """``(cores, prob, law)`` of ``classes[i]``."""
    where = f"classes[{i}]."
    if not isinstance(c, dict):
        raise _Invalid(f"classes[{i}]", f"must be a table, got {_type_name(c)} {_shown(c)}")
    law = _law_name(c, where)
    params, build = _LAWS[law]
    _check_keys(c, _CLASS_KEYS + params, (), where, f"a class of law {law!r}")
    cores = _integer(c["cores"], f"{where}cores")
    if cores > servers:
        raise _Invalid(f"{where}cores", f"{cores} exceeds servers ({servers})")
    return cores, _probability(c["prob"], f"{where}prob"), build(c, where)


def workload_from_dict(spec, default_name: str = "") -> Workload:
    """The :class:`~jaxqueue.mjqm.Workload` of a parsed file (see the module docstring).

    Raises:
        ValueError: ``"FIELD: what is wrong"`` (one line).
    """
    if not isinstance(spec, dict):
        raise _Invalid("top level", f"must be a table (JSON object), got {_type_name(spec)}")
    _check_keys(spec, _TOP_KEYS, ("name",), "", "the top level")
    servers = _integer(spec["servers"], "servers")
    name = spec.get("name", default_name)
    if not isinstance(name, str):
        raise _Invalid("name", f"must be a string, got {_type_name(name)} {_shown(name)}")
    classes = spec["classes"]
    if not isinstance(classes, list):
        raise _Invalid("classes", f"must be an array of tables, got {_type_name(classes)}")
    if not classes:
        raise _Invalid("classes", "empty; give at least one class ([[classes]] in TOML)")
    parsed = [_class(c, i, servers) for i, c in enumerate(classes)]
    cores, probs, services = map(list, zip(*parsed, strict=True))
    _sums_to_one(probs, "classes[*].prob")
    return Workload(servers, cores, np.array(probs), services, name=name)


def read_document(path) -> dict:
    """The JSON or TOML document in the file ``path`` (by suffix; else JSON, then TOML): the
    one reader of every spec and workload file. Raises a one-line ``ValueError`` ``"PATH:
    what is wrong"`` (no such file, a directory, not UTF-8, invalid JSON / TOML with line and
    column, a document that is not a table)."""
    label = os.fspath(path)
    path = pathlib.Path(path)
    try:
        doc = _parse(path, _read_text(path))
    except ValueError as err:
        raise ValueError(_one_line(f"{label}: {err}")) from None
    if not isinstance(doc, dict):
        raise ValueError(f"{label}: the document must be a table (an object), got a list")
    return doc


def load(path) -> Workload:
    """The workload described by the TOML or JSON file ``path``.

    Raises:
        ValueError: one line ``"PATH: FIELD: what is wrong"`` (or ``"PATH: no such file"``,
            ``"PATH: invalid TOML: ... (at line L, column C)"``, ...).

    Examples:
        >>> w = load("examples/workloads/five-class-exp.toml")  # doctest: +SKIP
        >>> w.servers, w.n_classes
        ((20,), 5)
    """
    label = os.fspath(path)
    path = pathlib.Path(path)
    try:
        text = _read_text(path)
        return workload_from_dict(_parse(path, text), default_name=path.stem)
    except ValueError as err:
        raise ValueError(_one_line(f"{label}: {err}")) from None
    except (TypeError, KeyError, IndexError, AttributeError, OverflowError, OSError) as err:
        # Safety net: the checks above should leave nothing for Python to trip on.
        raise ValueError(
            _one_line(f"{label}: invalid workload ({type(err).__name__}: {err})")
        ) from None
