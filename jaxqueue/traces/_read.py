"""Job logs: the Standard Workload Format (SWF) of the Parallel Workloads Archive and plain CSV.

SWF: one job a line, 18 whitespace-separated numbers (job number, submit time, wait time, run
time, allocated processors, average CPU time, used memory, requested processors, requested
time, requested memory, status, user, group, executable, queue, partition, preceding job,
think time), ``-1`` for a missing value, ``;`` header comments (``; MaxProcs: 128``: the
machine size; ``MaxNodes`` where ``MaxProcs`` is absent). The format sorts lines by submit
time; logs written by simulators in job order are sorted here (stably).
Status: 1 completed, 0 failed, 5 cancelled, -1 unknown; 2, 3 and 4 mark the lines of the
partial executions of a checkpointed job, whose whole is the job's own line (0, 1 or 5), so
they are no jobs of their own. A job's cores are its allocated processors, else (missing) its
requested ones. A job *ran* (:attr:`JobLog.runnable`) when it is no partial execution, its
cores and run time are known, and it is not a cancelled job that never ran (run time 0).

CSV: a header row naming ``submit``, ``cores``, ``runtime`` and optionally ``wait``,
``requested_time`` (other columns ignored), ``#`` comment lines (``# MaxProcs: N`` as in SWF),
an empty cell or ``-1`` for a missing optional value; rows sorted by submit time (stably).

Every malformed value is one ``ValueError`` line ``PATH:LINE: field K (NAME): what is wrong``.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import math
import os
import pathlib
import types

import numpy as np

from .._document import read_bytes
from .._tables import pandas

__all__ = ["JobLog", "read", "SWF_FIELDS"]

#: The 18 fields of an SWF line, in order (1-based in error messages, as in the format).
SWF_FIELDS = (
    "job",
    "submit",
    "wait",
    "runtime",
    "allocated_cores",
    "cpu_time",
    "memory",
    "requested_cores",
    "requested_time",
    "requested_memory",
    "status",
    "user",
    "group",
    "executable",
    "queue",
    "partition",
    "preceding_job",
    "think_time",
)
_PARTIAL = (2, 3, 4)  # partial executions of a checkpointed job
_STATUSES = (-1, 0, 1, 2, 3, 4, 5)
_CSV_REQUIRED = ("submit", "cores", "runtime")
_CSV_OPTIONAL = ("wait", "requested_time")


def _frozen(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    x.setflags(write=False)
    return x


@dataclasses.dataclass(frozen=True, eq=False)
class JobLog:
    """An immutable table of jobs in order of submission, one numpy array per column (read-only;
    ``NaN`` or ``-1`` where the log has no value), and the machine size.

    Attributes:
        path: the file read. format: ``"swf"``, ``"csv"`` (or ``"synthetic"``: drawn).
        servers: the machine size (cores), ``None`` when the log does not give it.
        servers_from: where ``servers`` comes from (``"MaxProcs"``, ``"MaxNodes"``,
            ``"argument"``, ``"workload"``, ``None``).
        header: the header comments ``key -> value`` (a read-only mapping).
        line: the line of each job in the file (1-based).
        job: job numbers. submit, wait, runtime, requested_time: seconds (float).
        cores: allocated cores, else the requested ones (``-1``: unknown).
        requested_cores: ``-1`` where missing. status: SWF status (CSV: 1). user: ``-1`` where
            missing.
    """

    path: str
    format: str
    servers: int | None
    servers_from: str | None
    header: types.MappingProxyType
    line: np.ndarray
    job: np.ndarray
    submit: np.ndarray
    wait: np.ndarray
    runtime: np.ndarray
    cores: np.ndarray
    requested_cores: np.ndarray
    requested_time: np.ndarray
    status: np.ndarray
    user: np.ndarray

    _COLUMNS = (
        "line",
        "job",
        "submit",
        "wait",
        "runtime",
        "cores",
        "requested_cores",
        "requested_time",
        "status",
        "user",
    )

    def __len__(self) -> int:
        return int(self.submit.shape[0])

    @property
    def runnable(self) -> np.ndarray:
        """The jobs that ran on the machine (module docstring), a boolean mask."""
        partial = np.isin(self.status, _PARTIAL)
        known = (self.cores >= 1) & np.isfinite(self.runtime)
        never_ran = (self.status == 5) & ~(self.runtime > 0)
        return known & ~partial & ~never_ran

    def left_out(self) -> dict[str, int]:
        """How many jobs :attr:`runnable` leaves out, by reason."""
        partial = np.isin(self.status, _PARTIAL)
        cancelled = ~partial & (self.status == 5) & ~(self.runtime > 0)
        unknown = ~partial & ~cancelled & ~((self.cores >= 1) & np.isfinite(self.runtime))
        out = {
            "partial executions": int(partial.sum()),
            "cancelled before running": int(cancelled.sum()),
            "cores or run time unknown": int(unknown.sum()),
        }
        return {k: v for k, v in out.items() if v}

    def select(self, mask) -> JobLog:
        """The log of the jobs where ``mask`` (a boolean mask or indices), same machine."""
        cols = {k: _frozen(getattr(self, k)[mask]) for k in self._COLUMNS}
        return dataclasses.replace(self, **cols)

    def with_servers(self, servers: int) -> JobLog:
        """The same jobs on a machine of ``servers`` cores."""
        if isinstance(servers, bool) or not isinstance(servers, (int, np.integer)) or servers < 1:
            raise ValueError(f"servers must be an integer >= 1, got {servers!r}")
        return dataclasses.replace(self, servers=int(servers), servers_from="argument")

    def to_frame(self):
        """The jobs as a pandas DataFrame, one row per job (needs the ``tables`` extra)."""
        pd = pandas()
        return pd.DataFrame({k: np.asarray(getattr(self, k)) for k in self._COLUMNS})

    def __repr__(self) -> str:
        return (
            f"JobLog({self.path!r}, {len(self)} jobs, format={self.format!r}, "
            f"servers={self.servers})"
        )


class _Bad(ValueError):
    """A malformed value: ``LINE: field K (NAME): what``."""


def _bad(line: int, what: str, message: str) -> _Bad:
    return _Bad(f"{line}: {what}: {message}")


def read(path, *, servers: int | None = None, format: str | None = None) -> JobLog:
    """The job log in the file ``path`` (SWF, or CSV; a ``.gz`` file is decompressed).

    Args:
        path: the file. Its format by suffix (``.swf``, ``.csv``, either with ``.gz``) unless
            ``format`` (``"swf"`` or ``"csv"``) says it.
        servers: the machine size, overriding the log's header.

    Returns:
        :class:`JobLog`.

    Raises:
        ValueError: one line ``PATH:LINE: field K (NAME): what is wrong`` (or ``PATH: ...``
            for the file as a whole).

    Examples:
        >>> log = read("tests/traces/data/handwritten.swf")  # doctest: +SKIP
        >>> log.servers, len(log)
        (8, 12)
    """
    label = os.fspath(path)
    p = pathlib.Path(path)
    name = p.name.lower().removesuffix(".gz")
    fmt = format or ("csv" if name.endswith(".csv") else "swf" if name.endswith(".swf") else None)
    if fmt not in ("swf", "csv"):
        raise ValueError(
            f"{label}: unknown log format; name the file .swf or .csv (or pass format='swf' "
            "or 'csv')"
        )
    try:
        text = _text(p)
        log = _read_swf(text) if fmt == "swf" else _read_csv(text)
    except _Bad as err:
        raise ValueError(f"{label}:{err}") from None
    except ValueError as err:
        raise ValueError(f"{label}: {err}") from None
    log = dataclasses.replace(log, path=label)
    return log if servers is None else log.with_servers(servers)


def _text(p: pathlib.Path) -> str:
    data = read_bytes(p)
    try:
        if p.name.lower().endswith(".gz"):
            data = gzip.decompress(data)
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise ValueError(f"cannot read the file ({err})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        try:  # old logs carry Latin-1 in their header comments
            return data.decode("latin-1")
        except UnicodeDecodeError as err:  # pragma: no cover - latin-1 decodes every byte
            raise ValueError(f"not text (bad byte at offset {err.start})") from None


def _header_size(value: str, line: int, key: str) -> int:
    try:
        n = int(value.split()[0])
    except (ValueError, IndexError):
        raise _bad(line, f"header {key}", f"must be an integer >= 1, got {value!r}") from None
    if n < 1:
        raise _bad(line, f"header {key}", f"must be an integer >= 1, got {n}")
    return n


def _servers(header: dict, where: dict) -> tuple[int | None, str | None]:
    for key in ("MaxProcs", "MaxNodes"):
        if key in header:
            return _header_size(header[key], where[key], key), key
    return None, None


def _comment(body: str, line: int, header: dict, where: dict) -> None:
    key, sep, value = body.partition(":")
    key = key.strip()
    if sep and key and " " not in key and key not in header:
        header[key] = value.strip()
        where[key] = line


def _body(text: str, comment: str) -> tuple[dict, dict, list]:
    """``(header, where, rows)`` of ``text``: its ``KEY: value`` comments (lines starting with
    ``comment``, :func:`_comment`) and their line numbers, and ``(line number, stripped line,
    line)`` of every other line that is not blank."""
    header: dict[str, str] = {}
    where: dict[str, int] = {}
    rows = []
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if s and s[0] == comment:
            _comment(s[1:], n, header, where)
        elif s:
            rows.append((n, s, raw))
    return header, where, rows


def _read_swf(text: str) -> JobLog:
    header, where, rows = _body(text, ";")
    tokens: list[str] = []
    lines: list[int] = []
    for n, s, _ in rows:
        fields = s.split()
        if len(fields) != 18:
            raise _bad(n, "line", f"{len(fields)} fields; an SWF line has 18 (-1 where missing)")
        tokens.extend(fields)
        lines.append(n)
    servers, source = _servers(header, where)
    line = np.asarray(lines, dtype=np.int64)
    try:
        values = np.array(tokens, dtype=np.float64).reshape(-1, 18)
    except ValueError:
        values = None
        for k, tok in enumerate(tokens):
            try:
                float(tok)
            except ValueError:
                i, f = divmod(k, 18)
                raise _bad(lines[i], _field(f), f"not a number: {tok!r}") from None
    return _job_log("swf", (servers, source), header, line, _check_swf(values, line))


def _field(f: int) -> str:
    return f"field {f + 1} ({SWF_FIELDS[f]})"


def _first(bad: np.ndarray, line: np.ndarray, what: str, message, values=None):
    """Raise for the first row where ``bad``, if any."""
    if bad.any():
        i = int(np.argmax(bad))
        msg = message(values[i]) if values is not None else message
        raise _bad(int(line[i]), what, msg)


def _shown(x: float) -> str:
    return str(int(x)) if math.isfinite(x) and x == int(x) else repr(float(x))


def _check_swf(v: np.ndarray, line: np.ndarray) -> dict:
    """The columns of the SWF values ``v`` (``(jobs, 18)``), each checked by its rule."""
    if v.shape[0] == 0:
        raise ValueError("no job lines (an SWF file has one line of 18 fields per job)")
    for f in range(18):
        x = v[:, f]
        _first(~np.isfinite(x), line, _field(f), lambda x: f"not a finite number: {x}", x)
        _first(
            (x < 0) & (x != -1),
            line,
            _field(f),
            lambda x: f"negative ({_shown(x)}); -1 is the only negative value (missing)",
            x,
        )
    for f in (0, 4, 7, 10, 11, 12, 13, 14, 15, 16):  # integer fields
        x = v[:, f]
        bad = (x != np.round(x)) | (np.abs(x) > 2.0**53)
        _first(bad, line, _field(f), lambda x: f"must be an integer, got {x!r}", x)
    status = v[:, 10].astype(np.int64)
    _first(
        ~np.isin(status, _STATUSES),
        line,
        _field(10),
        lambda x: (
            f"{x}: not a status of the format (1 completed, 0 failed, 5 cancelled, "
            "2-4 partial executions, -1 unknown)"
        ),
        status,
    )
    submit = v[:, 1]
    _first(submit == -1, line, _field(1), "missing (-1); every job has a submit time")
    missing = lambda x: np.where(x == -1, np.nan, x)  # noqa: E731
    alloc, req = v[:, 4].astype(np.int64), v[:, 7].astype(np.int64)
    cores = np.where(alloc >= 1, alloc, np.where(req >= 1, req, -1))
    return {
        "job": v[:, 0].astype(np.int64),
        "submit": submit,
        "wait": missing(v[:, 2]),
        "runtime": missing(v[:, 3]),
        "cores": cores,
        "requested_cores": np.where(req >= 1, req, -1),
        "requested_time": missing(v[:, 8]),
        "status": status,
        "user": v[:, 11].astype(np.int64),
    }


def _read_csv(text: str) -> JobLog:
    header, where, body = _body(text, "#")
    if not body:
        raise ValueError("no header row (a CSV log names its columns: submit, cores, runtime)")
    numbers = [n for n, _, _ in body]
    rows = list(csv.reader(io.StringIO("\n".join(raw for _, _, raw in body))))
    names = [c.strip() for c in rows[0]]
    dup = sorted({c for c in names if names.count(c) > 1 and c})
    if dup:
        raise _bad(numbers[0], "header", f"column {dup[0]!r} named twice")
    missing_cols = [c for c in _CSV_REQUIRED if c not in names]
    if missing_cols:
        raise _bad(
            numbers[0],
            "header",
            f"no column {missing_cols[0]!r}; a CSV log has columns submit, cores, runtime "
            f"(and optionally wait, requested_time), got {', '.join(names)}",
        )
    if len(rows) < 2:
        raise ValueError("no job rows after the header")
    index = {c: names.index(c) for c in _CSV_REQUIRED + _CSV_OPTIONAL if c in names}
    out = {c: np.full(len(rows) - 1, np.nan) for c in index}
    for r, row in enumerate(rows[1:]):
        n = numbers[r + 1]
        if len(row) != len(names):
            raise _bad(n, "row", f"{len(row)} cells; the header has {len(names)}")
        for c, k in index.items():
            out[c][r] = _csv_value(row[k].strip(), c, n)
    line = np.asarray(numbers[1:], dtype=np.int64)
    count = len(rows) - 1
    cols = {
        "job": np.arange(1, count + 1, dtype=np.int64),
        "submit": out["submit"],
        "wait": out.get("wait", np.full(count, np.nan)),
        "runtime": out["runtime"],
        "cores": out["cores"].astype(np.int64),
        "requested_cores": np.full(count, -1, np.int64),
        "requested_time": out.get("requested_time", np.full(count, np.nan)),
        "status": np.ones(count, np.int64),
        "user": np.full(count, -1, np.int64),
    }
    return _job_log("csv", _servers(header, where), header, line, cols)


def _job_log(fmt: str, servers, header: dict, line, cols: dict) -> JobLog:
    """The log of the jobs ``cols`` (one array per field, read from the lines ``line``) in
    submission order (stable: file order on ties), with its header and ``servers``, the
    machine size and where it came from."""
    order = np.argsort(cols["submit"], kind="stable")
    return JobLog(
        path="",
        format=fmt,
        servers=servers[0],
        servers_from=servers[1],
        header=types.MappingProxyType(header),
        line=_frozen(line[order]),
        **{k: _frozen(v[order]) for k, v in cols.items()},
    )


def _csv_value(cell: str, column: str, line: int) -> float:
    what = f"column {column!r}"
    optional = column in _CSV_OPTIONAL
    if cell == "":
        if optional:
            return math.nan
        raise _bad(line, what, "empty; every job has a value here")
    try:
        x = float(cell)
    except ValueError:
        raise _bad(line, what, f"not a number: {cell!r}") from None
    if not math.isfinite(x):
        raise _bad(line, what, f"not a finite number: {cell!r}")
    if optional and x == -1:
        return math.nan
    if column == "cores":
        if x != int(x) or x < 1:
            raise _bad(line, what, f"must be an integer >= 1, got {cell!r}")
    elif column == "requested_time" and x <= 0:
        raise _bad(line, what, f"must be > 0 (or -1, empty: missing), got {cell!r}")
    elif x < 0:
        extra = " (or -1, empty: missing)" if optional else ""
        raise _bad(line, what, f"must be >= 0{extra}, got {cell!r}")
    return x
