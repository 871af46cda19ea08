"""The one reader of every spec and workload file, and of the pool spec strings.

Every reader here raises one ``ValueError`` line naming the file (or the spec) and the field:
``wl.toml: classes[2].law: unknown law 'gamma'; ...``, ``net.json: routing: ...``,
``pool.toml: server_sets[0] is empty``. A ``.toml`` file is read as TOML, a ``.json`` file
as JSON, any other file as JSON and else TOML (:func:`read_document`).

* **MJQM workloads** (:func:`load_workload`, :func:`workload_from_dict`; what
  ``jaxqueue.scenarios.get(PATH)`` and every ``--scenario FILE`` read), schema below;
* **pool files** (:func:`read_pool`, :func:`pool_from_dict`, :func:`read_pool_fields`):
  ``server_sets`` (0-based
  servers per class) and optional ``mu`` (default 1 each), or a typed pool ``counts``,
  ``type_sets``, optional ``mu``; both may carry ``lam`` and ``name``;
* **pool spec strings**: structures ``random:K=100,d=6+12,p=0.5+0.5``, ``line:K=100,d=10``,
  ``ring:K=100,d=10`` (:func:`parse_spec`), typed pools
  ``typed:counts=64+64,sets=0+1/1,mu=1+2`` (:func:`parse_typed_spec`) and the scheduler's
  ``random:S=100,d=2`` (:func:`parse_random_spec`);
* **network files** (:func:`read_network`, :func:`network_from_dict`): ``queues``, ``mu``,
  ``routing``, ``nu`` and / or ``population``.

The models are imported when a reader builds one, so this module sits beside them.

MJQM workload schema (one file describes one :class:`jaxqueue.mjqm.Workload`, Poisson
arrivals):

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
be written as integers. Errors name the file and the field, e.g. ``wl.toml: classes[2].law:
unknown law 'gamma'; choose one of exponential, ...`` (``classes[i]`` counts from 0).

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

import contextlib
import json
import math
import os
import pathlib
import tomllib

import numpy as np

from .dist import BoundedPareto, Deterministic, Erlang, Exponential, HyperExponential

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


def workload_from_dict(spec, default_name: str = ""):
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
    from .mjqm import Workload

    parsed = [_class(c, i, servers) for i, c in enumerate(classes)]
    cores, probs, services = map(list, zip(*parsed, strict=True))
    _sums_to_one(probs, "classes[*].prob")
    return Workload(servers, cores, np.array(probs), services, name=name)


def read_document(path) -> dict:
    """The JSON or TOML document in the file ``path`` (by suffix; else JSON, then TOML).

    Raises:
        ValueError: one line ``"PATH: what is wrong"`` (no such file, a directory, not UTF-8,
            invalid JSON / TOML with line and column, a document that is not a table).
    """
    with _in_file(path):
        return _document(path)


def _document(path) -> dict:
    path = pathlib.Path(path)
    doc = _parse(path, _read_text(path))
    if not isinstance(doc, dict):
        raise ValueError("the document must be a table (an object), got a list")
    return doc


@contextlib.contextmanager
def _in_file(path, what: str = "spec"):
    """Errors inside the block become one ``ValueError`` line ``"PATH: ..."``; a Python error
    a check missed becomes ``"PATH: invalid WHAT (TypeError: ...)"``."""
    label = os.fspath(path)
    try:
        yield
    except ValueError as err:
        raise ValueError(_one_line(f"{label}: {err}")) from None
    except (TypeError, KeyError, IndexError, AttributeError, OverflowError, OSError) as err:
        raise ValueError(
            _one_line(f"{label}: invalid {what} ({type(err).__name__}: {err})")
        ) from None


def load_workload(path):
    """The :class:`~jaxqueue.mjqm.Workload` described by the TOML or JSON file ``path``.

    Raises:
        ValueError: one line ``"PATH: FIELD: what is wrong"`` (or ``"PATH: no such file"``,
            ``"PATH: invalid TOML: ... (at line L, column C)"``, ...).

    Examples:
        >>> w = load_workload("examples/workloads/five-class-exp.toml")  # doctest: +SKIP
        >>> w.servers, w.n_classes
        ((20,), 5)
    """
    with _in_file(path, "workload"):
        path = pathlib.Path(path)
        return workload_from_dict(_parse(path, _read_text(path)), default_name=path.stem)


# ------------------------------------------------------------------ pool files
_POOL_KEYS = ("server_sets", "mu", "lam", "name")
_TYPED_KEYS = ("counts", "type_sets", "mu", "lam", "name")


def read_pool(path):
    """``(pool, lam)`` from a pool file (:func:`pool_from_dict`); errors ``"PATH: ..."``."""
    with _in_file(path, "pool"):
        return pool_from_dict(_document(path))


def pool_from_dict(data: dict, source: str | None = None):
    """``(pool, lam)`` of a pool document: a :class:`jaxqueue.pools.Pool` (``server_sets``,
    optional ``mu``, default 1 per server) or, with ``counts`` / ``type_sets``, a
    :class:`jaxqueue.pools.TypedPool`; ``lam`` the document's rates or ``None``.

    Raises:
        ValueError: ``"SOURCE: ..."`` (when ``source`` is given), a missing or unknown key or a
            pool refused.
    """
    if source is not None:
        with _in_file(source, "pool"):
            return pool_from_dict(data)
    if "counts" in data or "type_sets" in data:
        return typed_pool_from_dict(data)
    from .pools import Pool

    sets, mu, lam = _pool_fields(data)
    return Pool(sets, mu), lam


def read_pool_fields(path) -> tuple[list, np.ndarray, list | None]:
    """``(server_sets, mu, lam)`` of a pool file with ``server_sets`` (for models that take
    the sets and capacities themselves, such as the scheduler); errors ``"PATH: ..."``."""
    with _in_file(path, "pool"):
        data = _document(path)
        if "counts" in data or "type_sets" in data:
            raise ValueError("a typed pool (counts, type_sets); give server_sets and mu")
        return _pool_fields(data)


def _pool_fields(data: dict):
    if "server_sets" not in data:
        raise ValueError(
            "needs a 'server_sets' entry (and 'mu'), or 'counts' and 'type_sets' for a typed pool"
        )
    _known_keys(data, _POOL_KEYS, "a pool file")
    sets = data["server_sets"]
    mu = data.get("mu")
    if mu is None:
        mu = [1.0] * (1 + max((k for s in sets for k in s), default=0))
    return sets, np.asarray(mu, dtype=float), data.get("lam")


def typed_pool_from_dict(data: dict, source: str | None = "pool file"):
    """A typed pool from a document with ``counts``, ``type_sets``, optional ``mu`` (and
    ``lam``, ``name``): the JSON / TOML pool file of ``jaxqueue bf solve``.

    Returns:
        ``(pool, lam)``, ``lam`` the file's rates or ``None``.

    Raises:
        ValueError: ``"SOURCE: ..."``, a missing or unknown key or a pool refused.
    """
    if source is not None:
        with _in_file(source, "pool"):
            return typed_pool_from_dict(data, None)
    from .pools import TypedPool

    _known_keys(data, _TYPED_KEYS, "a typed pool file")
    for need in ("counts", "type_sets"):
        if need not in data:
            raise ValueError(f"a typed pool needs {need!r} (and type_sets, counts, mu)")
    mu = data.get("mu")
    mu = None if mu is None else np.asarray(mu, dtype=float)
    return TypedPool(data["counts"], data["type_sets"], mu), data.get("lam")


def _known_keys(data: dict, allowed, what: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; {what} takes {sorted(allowed)}")


# ------------------------------------------------------------------ pool spec strings
_KINDS = ("random", "line", "ring")
_KEYS = {"random": ("K", "d", "p", "mu"), "line": ("K", "d", "mu"), "ring": ("K", "d", "mu")}
_EXAMPLES = "random:K=100,d=10 | random:K=100,d=6+12,p=0.5+0.5 | line:K=100,d=10 | ring:K=100,d=10"
_TYPED_EXAMPLE = "typed:counts=64+64+32+16,sets=0+1/1+2/2+3/0+3[,mu=1+1+2+2]"


def _spec_items(spec: str, kind: str, allowed) -> dict[str, str]:
    """The ``key=value`` items after ``KIND:`` (keys among ``allowed``, none twice)."""
    items: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in spec.partition(":")[2].split(","))):
        key, eq, val = (x.strip() for x in item.partition("="))
        if not eq or not val:
            raise ValueError(f"pool spec item {item!r} must be key=value (spec {spec!r})")
        if key not in allowed:
            raise ValueError(
                f"unknown key {key!r} for {kind} pools in {spec!r}; allowed: {', '.join(allowed)}"
            )
        if key in items:
            raise ValueError(f"key {key!r} given twice in {spec!r}")
        items[key] = val
    return items


def _numbers(text: str, sep: str, conv, what: str, spec: str, example: str) -> list:
    try:
        return [conv(v.strip()) for v in text.split(sep)]
    except ValueError:
        kind = "integers" if conv is int else "numbers"
        raise ValueError(
            f"{what}={text!r} in {spec!r}: expected {kind} joined by {sep!r}; e.g. {example}"
        ) from None


def parse_spec(spec: str) -> tuple[str, dict]:
    """Parse a pool structure ``KIND:key=value,...`` into ``(kind, params)``.

    Kinds: ``random`` (keys ``K``, ``d``, optional ``p``, ``mu``; ``d`` and ``p`` may list
    several types joined by ``+``), ``line`` and ``ring`` (keys ``K``, ``d``, optional ``mu``).
    ``params`` maps each key to its list of values.

    Raises:
        ValueError: unknown kind or key, a missing or malformed value (the message shows the
            accepted forms).
    """
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"pool spec must look like {_EXAMPLES}; got {spec!r}")
    kind = spec.partition(":")[0].strip().lower()
    if kind not in _KINDS:
        raise ValueError(f"unknown pool structure {kind!r} in {spec!r}; known: {list(_KINDS)}")
    params: dict = {}
    for key, val in _spec_items(spec, kind, _KEYS[kind]).items():
        conv = int if key in ("K", "d") else float
        params[key] = _numbers(val, "+", conv, key, spec, _EXAMPLES)
        if (key in ("K", "mu") or (kind != "random" and key == "d")) and len(params[key]) != 1:
            raise ValueError(f"{key} takes one value for {kind} pools in {spec!r}, got {val!r}")
    for need in ("K", "d"):
        if need not in params:
            raise ValueError(f"pool spec {spec!r} lacks {need}=...; e.g. {_EXAMPLES}")
    _check_structure(spec, params)
    return kind, params


def _check_structure(spec: str, params: dict) -> None:
    K = params["K"][0]
    if K < 1:
        raise ValueError(f"K must be >= 1 in {spec!r}, got {K}")
    if any(not 1 <= x <= K for x in params["d"]):
        raise ValueError(f"degrees must lie in [1, K={K}] in {spec!r}, got d={params['d']}")
    if "p" in params:
        if len(params["p"]) != len(params["d"]):
            raise ValueError(
                f"p must give one share per degree in {spec!r}: {len(params['d'])} degrees, "
                f"{len(params['p'])} shares"
            )
        p = np.asarray(params["p"])
        if np.any(p < 0) or not abs(p.sum() - 1.0) <= 1e-6:
            raise ValueError(
                f"p must be shares >= 0 summing to 1 in {spec!r}, got sum {p.sum():.6g} (used "
                "as given, never rescaled)"
            )
    if "mu" in params and not params["mu"][0] > 0:
        raise ValueError(f"mu must be > 0 in {spec!r}")


def parse_typed_spec(spec: str):
    """The :class:`jaxqueue.pools.TypedPool` of a ``typed:counts=A+B+...,sets=0+1/1+2/...
    [,mu=x+y+...]`` spec.

    ``counts`` gives the servers of each type, ``sets`` the types of each class (classes
    separated by ``/``, types by ``+``, 0-based), ``mu`` the capacity of one server of each
    type (default 1).

    Raises:
        ValueError: not a ``typed:`` spec, an unknown, repeated, missing or malformed key, or
            a pool :class:`TypedPool` refuses (one line, showing the accepted form).
    """
    from .pools import TypedPool

    kind, colon, _ = spec.partition(":")
    if kind.strip().lower() != "typed" or not colon:
        raise ValueError(f"a typed pool spec looks like {_TYPED_EXAMPLE}; got {spec!r}")
    fields = _spec_items(spec, "typed", ("counts", "sets", "mu"))
    for need in ("counts", "sets"):
        if need not in fields:
            raise ValueError(f"pool spec {spec!r} lacks {need}=...; e.g. {_TYPED_EXAMPLE}")
    counts = _numbers(fields["counts"], "+", int, "counts", spec, _TYPED_EXAMPLE)
    sets = [_numbers(s, "+", int, "sets", spec, _TYPED_EXAMPLE) for s in fields["sets"].split("/")]
    mu = None
    if "mu" in fields:
        mu = np.asarray(_numbers(fields["mu"], "+", float, "mu", spec, _TYPED_EXAMPLE))
        if len(mu) != len(counts):
            raise ValueError(
                f"mu must give one capacity per type in {spec!r}: {len(counts)} types, "
                f"{len(mu)} values"
            )
    try:
        return TypedPool(counts, sets, mu)
    except ValueError as err:
        raise ValueError(f"{err} (spec {spec!r})") from None


def parse_random_spec(spec: str) -> tuple[int, int, float]:
    """``(S, d, mu)`` of the scheduler's ``random:S=100,d=2[,mu=1]`` (``K`` for ``S``): each
    job draws ``d`` of the ``S`` servers (capacity ``mu``) at arrival.

    Raises:
        ValueError: an unknown or repeated key, both or neither of ``S`` and ``K``, no ``d``,
            or values that are not integers (``mu``: a number).
    """
    items = _spec_items(spec, "random", ("S", "K", "d", "mu"))
    if ("S" in items) == ("K" in items) or "d" not in items:
        raise ValueError(f"--pool {spec!r}: give exactly one of S or K, and d")
    try:
        return int(items.get("S", items.get("K"))), int(items["d"]), float(items.get("mu", 1.0))
    except ValueError:
        raise ValueError(f"--pool {spec!r}: S/K and d must be integers, mu a number") from None


# ------------------------------------------------------------------ network files
_NETWORK_KEYS = ("queues", "mu", "routing", "nu", "population")


def read_network(path, *, dtype=None):
    """The :class:`jaxqueue.networks.Network` of a network file (:func:`network_from_spec`);
    errors ``"PATH: FIELD: ..."``."""
    with _in_file(path, "network"):
        return network_from_spec(_document(path), dtype=dtype)


def network_from_spec(spec: dict, *, dtype=None):
    """Build a :class:`jaxqueue.networks.Network` from a spec dict.

    Keys: ``queues`` (list of pools, each a list of class server sets, global server indices,
    classes numbered in order across pools), ``mu`` (server rates), ``routing`` (``C x C``
    matrix over classes), ``nu`` (external rates; open and mixed networks) and/or
    ``population`` (size of the closed chain).

    Args:
        spec: the parsed file.
        dtype: floating dtype of the arrays (default: numpy's float64, cast by JAX to its
            default precision).

    Returns:
        The validated network.

    Raises:
        ValueError: for unknown or missing keys and everything :class:`Network` refuses.
    """
    from .networks import Network

    if not isinstance(spec, dict):
        raise ValueError("spec: expected a table/object with keys queues, mu, routing, ...")
    unknown = sorted(set(spec) - set(_NETWORK_KEYS))
    if unknown:
        raise ValueError(f"unknown keys {unknown} (expected some of {sorted(_NETWORK_KEYS)})")
    missing = [k for k in ("queues", "mu", "routing") if k not in spec]
    if missing:
        raise ValueError(f"missing keys {missing}")
    if "nu" not in spec and "population" not in spec:
        raise ValueError("give nu (open classes) and/or population (closed chain)")

    def arr(name):
        try:
            return np.asarray(spec[name], dtype=dtype or np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{name}: not a numeric array ({err})") from None

    nu = arr("nu") if "nu" in spec else None
    return Network(
        spec["queues"], arr("mu"), arr("routing"), nu=nu, population=spec.get("population")
    )
