"""Pool files and typed pool spec strings.

A pool file (TOML or JSON, :func:`read_pool`) holds ``server_sets`` (0-based servers per
class) and optional ``mu`` (default 1 each), or a typed pool ``counts``, ``type_sets``,
optional ``mu``; both may carry ``lam`` and ``name``. A typed pool spec reads
``typed:counts=64+64,sets=0+1/1,mu=1+2`` (:func:`parse_typed_spec`). Errors are one line
naming the file (or the spec) and the field.
"""

from __future__ import annotations

import numpy as np

from .._document import document, in_file, known_keys, number, spec_items, spec_numbers, vector
from ._pool import Pool
from ._typed import TypedPool

_POOL_KEYS = ("server_sets", "mu", "lam", "name")
_TYPED_KEYS = ("counts", "type_sets", "mu", "lam", "name")
_TYPED_EXAMPLE = "typed:counts=64+64+32+16,sets=0+1/1+2/2+3/0+3[,mu=1+1+2+2]"


def read_pool(path):
    """``(pool, lam)`` from a pool file: a :class:`Pool` (``server_sets``, optional ``mu``,
    default 1 per server) or, with ``counts`` / ``type_sets``, a :class:`TypedPool`; ``lam``
    the file's rates or ``None``.

    Raises:
        ValueError: ``"PATH: ..."``, a missing or unknown key or a pool refused.
    """
    with in_file(path, "pool"):
        return _pool_from_dict(document(path))


def _pool_from_dict(data: dict):
    if "counts" in data or "type_sets" in data:
        return typed_pool_from_dict(data)
    sets, mu, lam = _pool_fields(data)
    return Pool(sets, mu), lam


def read_pool_fields(path) -> tuple[list, np.ndarray, list | None]:
    """``(server_sets, mu, lam)`` of a pool file with ``server_sets`` (for models that take
    the sets and capacities themselves, such as the scheduler); errors ``"PATH: ..."``."""
    with in_file(path, "pool"):
        data = document(path)
        if "counts" in data or "type_sets" in data:
            raise ValueError("a typed pool (counts, type_sets); give server_sets and mu")
        return _pool_fields(data)


def _pool_fields(data: dict):
    if "server_sets" not in data:
        raise ValueError(
            "needs a 'server_sets' entry (and 'mu'), or 'counts' and 'type_sets' for a typed pool"
        )
    known_keys(data, _POOL_KEYS, "a pool file")
    sets = data["server_sets"]
    mu = data.get("mu")
    if mu is None:
        mu = [1.0] * (1 + max((k for s in sets for k in s), default=0))
    return sets, _capacities(mu), data.get("lam")


def _capacities(mu) -> np.ndarray:
    """``mu`` of a file as floats; an entry that is not a number is named (``mu[1]: ...``)."""
    return np.asarray(vector(mu, "mu", number) if isinstance(mu, list) else mu, dtype=float)


def typed_pool_from_dict(data: dict, source: str | None = "pool file"):
    """A typed pool from a document with ``counts``, ``type_sets``, optional ``mu`` (and
    ``lam``, ``name``): the JSON / TOML pool file of ``jaxqueue bf solve``.

    Returns:
        ``(pool, lam)``, ``lam`` the file's rates or ``None``.

    Raises:
        ValueError: ``"SOURCE: ..."``, a missing or unknown key or a pool refused.
    """
    if source is not None:
        with in_file(source, "pool"):
            return typed_pool_from_dict(data, None)
    known_keys(data, _TYPED_KEYS, "a typed pool file")
    for need in ("counts", "type_sets"):
        if need not in data:
            raise ValueError(f"a typed pool needs {need!r} (and type_sets, counts, mu)")
    mu = data.get("mu")
    mu = None if mu is None else _capacities(mu)
    return TypedPool(data["counts"], data["type_sets"], mu), data.get("lam")


def parse_typed_spec(spec: str) -> TypedPool:
    """The :class:`TypedPool` of a ``typed:counts=A+B+...,sets=0+1/1+2/...[,mu=x+y+...]``
    spec.

    ``counts`` gives the servers of each type, ``sets`` the types of each class (classes
    separated by ``/``, types by ``+``, 0-based), ``mu`` the capacity of one server of each
    type (default 1).

    Raises:
        ValueError: not a ``typed:`` spec, an unknown, repeated, missing or malformed key, or
            a pool :class:`TypedPool` refuses (one line, showing the accepted form).
    """
    kind, colon, _ = spec.partition(":")
    if kind.strip().lower() != "typed" or not colon:
        raise ValueError(f"a typed pool spec looks like {_TYPED_EXAMPLE}; got {spec!r}")
    fields = spec_items(spec, "typed", ("counts", "sets", "mu"))
    for need in ("counts", "sets"):
        if need not in fields:
            raise ValueError(f"pool spec {spec!r} lacks {need}=...; e.g. {_TYPED_EXAMPLE}")
    counts = spec_numbers(fields["counts"], "+", int, "counts", spec, _TYPED_EXAMPLE)
    sets = [
        spec_numbers(s, "+", int, "sets", spec, _TYPED_EXAMPLE) for s in fields["sets"].split("/")
    ]
    mu = None
    if "mu" in fields:
        mu = np.asarray(spec_numbers(fields["mu"], "+", float, "mu", spec, _TYPED_EXAMPLE))
        if len(mu) != len(counts):
            raise ValueError(
                f"mu must give one capacity per type in {spec!r}: {len(counts)} types, "
                f"{len(mu)} values"
            )
    try:
        return TypedPool(counts, sets, mu)
    except ValueError as err:
        raise ValueError(f"{err} (spec {spec!r})") from None
