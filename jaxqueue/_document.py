"""Documents and their fields: the bottom of every file and spec reader.

A ``.toml`` file is read as TOML, a ``.json`` file as JSON, any other file as JSON and else
TOML (:func:`read_document`). Every error is one ``ValueError`` line naming the file (or the
spec) and the field: ``wl.toml: classes[2].law: unknown law 'gamma'; ...``. The typed getters
(:func:`integer`, :func:`positive`, ...) raise :class:`FieldError` naming the field; the
context :func:`in_file` puts the file's name in front.

Spec strings (``KIND:key=value,...``) are split by :func:`spec_items` and :func:`spec_numbers`.

Each model reads its own files over this module (``pools``, ``pools.structured``,
``networks``, ``sched``, ``mjqm``); it imports no model.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import tomllib

PROB_TOL = 1e-9


class FieldError(ValueError):
    """A bad field: ``field`` (e.g. ``classes[2].mean``) and what is wrong with it, shown as
    ``"FIELD: what is wrong"``."""

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


def one_line(text) -> str:
    """``text`` on one line."""
    return " ".join(str(text).splitlines())


def read_bytes(path: pathlib.Path) -> bytes:
    """The bytes of the file ``path``, or a ``ValueError`` saying in a few words why not (no
    such file, a directory, unreadable): every reader of the package opens its files here."""
    if not path.exists():
        raise ValueError("no such file")
    if path.is_dir():
        raise ValueError("is a directory, not a file")
    try:
        return path.read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read the file ({err.strerror or err})") from None


def _read_text(path: pathlib.Path) -> str:
    data = read_bytes(path)
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
        raise FieldError(
            "invalid JSON", f"{err.msg} at line {err.lineno}, column {err.colno}"
        ) from None
    except _DuplicateKey as err:
        raise FieldError("invalid JSON", str(err)) from None
    except RecursionError:
        raise FieldError("invalid JSON", "nested too deeply") from None


def _parse_toml(text: str):
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise FieldError("invalid TOML", one_line(err)) from None
    except RecursionError:
        raise FieldError("invalid TOML", "nested too deeply") from None


def _parse(path: pathlib.Path, text: str):
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return _parse_toml(text)
    if suffix == ".json":
        return _parse_json(text)
    try:
        return _parse_json(text)
    except FieldError as json_err:
        try:
            return _parse_toml(text)
        except FieldError as toml_err:
            raise ValueError(
                f"neither valid JSON ({json_err.message}) nor valid TOML ({toml_err.message})"
            ) from None


def parse_file(path) -> object:
    """The parsed content of the file ``path``, whatever its type (no file name in errors:
    call it inside :func:`in_file`)."""
    path = pathlib.Path(path)
    return _parse(path, _read_text(path))


def document(path) -> dict:
    """The table in the file ``path`` (no file name in errors: call it inside
    :func:`in_file`)."""
    doc = parse_file(path)
    if not isinstance(doc, dict):
        raise ValueError("the document must be a table (an object), got a list")
    return doc


def read_document(path) -> dict:
    """The JSON or TOML document in the file ``path`` (by suffix; else JSON, then TOML).

    Raises:
        ValueError: one line ``"PATH: what is wrong"`` (no such file, a directory, not UTF-8,
            invalid JSON / TOML with line and column, a document that is not a table).
    """
    with in_file(path):
        return document(path)


@contextlib.contextmanager
def in_file(path, what: str = "spec"):
    """Errors inside the block become one ``ValueError`` line ``"PATH: ..."``; a Python error
    a check missed becomes ``"PATH: invalid WHAT (TypeError: ...)"``."""
    label = os.fspath(path)
    try:
        yield
    except ValueError as err:
        raise ValueError(one_line(f"{label}: {err}")) from None
    except (TypeError, KeyError, IndexError, AttributeError, OverflowError, OSError) as err:
        raise ValueError(
            one_line(f"{label}: invalid {what} ({type(err).__name__}: {err})")
        ) from None


# ------------------------------------------------------------------ typed fields
_TYPE_NAMES = {str: "string", bool: "boolean", int: "integer", float: "float", list: "array"}


def shown(value) -> str:
    """``value`` as written in the file (``true``, not ``True``), cut to 60 characters."""
    text = json.dumps(value) if isinstance(value, bool) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def type_name(value) -> str:
    """The document's name of the type of ``value`` (``table``, ``array``, ``integer``...)."""
    if isinstance(value, dict):
        return "table"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def integer(value, field: str, minimum: int = 1) -> int:
    """``value``, an integer >= ``minimum`` (a float written ``2.0`` is refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(field, f"must be an integer, got {type_name(value)} {shown(value)}")
    if value < minimum:
        raise FieldError(field, f"must be >= {minimum}, got {value}")
    return value


def number(value, field: str) -> float:
    """``value``, a finite number, as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(field, f"must be a number, got {type_name(value)} {shown(value)}")
    try:
        x = float(value)
    except OverflowError:
        x = math.inf
    if not math.isfinite(x):
        raise FieldError(field, f"must be finite, got {value!r}")
    return x


def positive(value, field: str) -> float:
    """``value``, a finite number > 0."""
    x = number(value, field)
    if x <= 0:
        raise FieldError(field, f"must be > 0, got {value!r}")
    return x


def probability(value, field: str) -> float:
    """``value``, a finite number >= 0."""
    x = number(value, field)
    if x < 0:
        raise FieldError(field, f"must be >= 0, got {value!r}")
    return x


def sums_to_one(probs, field: str) -> None:
    """Refuse probabilities whose sum is not 1 within :data:`PROB_TOL`."""
    total = math.fsum(probs)
    if abs(total - 1.0) > PROB_TOL:
        raise FieldError(field, f"the probabilities sum to {total!r}, not 1 (tolerance 1e-9)")


def vector(value, field: str, element) -> list[float]:
    """A non-empty array, each entry read by ``element(entry, "FIELD[i]")``."""
    if not isinstance(value, list):
        raise FieldError(
            field, f"must be an array of numbers, got {type_name(value)} {shown(value)}"
        )
    if not value:
        raise FieldError(field, "must not be empty")
    return [element(v, f"{field}[{i}]") for i, v in enumerate(value)]


def check_keys(table: dict, required, optional, where: str, context: str) -> None:
    """No key outside ``required + optional`` (``context``: where the keys belong), none of
    ``required`` missing."""
    allowed = (*required, *optional)
    for key in table:
        if key not in allowed:
            hint = "; arrivals are always Poisson" if key == "arrival" and not where else ""
            raise FieldError(
                f"{where}{key}", f"unknown key ({context} takes {', '.join(allowed)}){hint}"
            )
    for key in required:
        if key not in table:
            raise FieldError(f"{where}{key}", f"missing ({context} needs {', '.join(required)})")


def known_keys(data: dict, allowed, what: str) -> None:
    """No key outside ``allowed`` (``what``: the kind of document)."""
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; {what} takes {sorted(allowed)}")


# ------------------------------------------------------------------ spec strings
def spec_items(spec: str, kind: str, allowed) -> dict[str, str]:
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


def spec_numbers(text: str, sep: str, conv, what: str, spec: str, example: str) -> list:
    """The values of one spec item, ``conv`` of each piece of ``text`` split at ``sep``."""
    try:
        return [conv(v.strip()) for v in text.split(sep)]
    except ValueError:
        kind = "integers" if conv is int else "numbers"
        raise ValueError(
            f"{what}={text!r} in {spec!r}: expected {kind} joined by {sep!r}; e.g. {example}"
        ) from None
