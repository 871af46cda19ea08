"""Shared command-line plumbing: common options, x64, JSON/table output, progress."""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import inspect
import json
import logging
import math
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable

import numpy as np

from .._document import read_document
from ..scenarios import get as get_scenario
from ..scenarios import names as scenario_names

DEFAULT_SEED = 20261122


STATUSES = ("ok", "unconverged", "biased", "nonstationary", "overflow", "unstable")
"""The one status vocabulary of every estimate: ``ok`` means the figures can be trusted;
``unconverged`` (a cap on a horizon, too few replications), ``biased`` (a bias not brought under
its tolerance), ``nonstationary`` (the run has not reached steady state), ``overflow`` (a buffer
overflowed), ``unstable`` (a load at or beyond the stability limit) say why not."""

EXIT_RUNTIME = 1
"""Exit status of a well-formed command whose work failed: a file that cannot be read or whose
content is refused, a model that refuses the values (an unstable load, a workload the exact
solver cannot take, a size beyond the memory limit), or any unexpected error."""

EXIT_USAGE = 2
"""Exit status of a command line that is not well formed: an unknown command or option, a
missing or conflicting option, a value of the wrong form or outside its option's range, an
unknown scenario, preset or policy name, a malformed pool structure."""

EXIT_NOT_OK = 3
"""Exit status of an estimating command under ``--strict`` whose status is not ``ok``."""


class UsageError(ValueError):
    """A command line that is not well formed (exit status :data:`EXIT_USAGE`); ``prog`` is
    the command that refused it."""

    def __init__(self, message: str, prog: str = "jaxqueue"):
        super().__init__(message)
        self.prog = prog


@contextlib.contextmanager
def usage_errors():
    """Inside this block a ``ValueError`` is a :class:`UsageError`: for the checks of what the
    command line says (names, option syntax), as opposed to what a model or a file says."""
    try:
        yield
    except UsageError:
        raise
    except ValueError as err:
        raise UsageError(str(err)) from None


_ROLE = re.compile(r":(?:func|class|data|meth|attr|mod|obj):`~?([^`]+)`")


class _HelpFormatter(argparse.HelpFormatter):
    """Help with each option's default (``none`` where it is unset), unless the help already
    names it or the option is a flag, in plain text: the docstrings' reStructuredText markup
    (double backticks, Sphinx roles) is taken out."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.nargs == 0 or action.default is argparse.SUPPRESS:
            return text
        if action.required:
            return text
        shown = "none" if action.default is None else "%(default)s"
        return f"{text} (default: {shown})" if text else f"(default: {shown})"

    def format_help(self) -> str:
        return _ROLE.sub(r"\1", super().format_help()).replace("``", "")


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``PROG: error: MESSAGE`` (exit status 2),
    without the usage block (``--help`` has it), and whose help shows the defaults."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        raise UsageError(f"{message} (see --help)", self.prog)


def _number(text: str, kind, check, rule: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {rule}, got {text!r}") from None
    if not check(value):
        raise argparse.ArgumentTypeError(f"expected {rule}, got {text}")
    return value


def number_list(rule: str, check) -> Callable[[str], list[tuple[str, float]]]:
    """An ``argparse`` type: comma-separated numbers, each checked and kept with its text as
    typed (the text is a JSON key)."""
    return lambda text: [
        (part, _number(part, float, check, rule)) for part in (x.strip() for x in text.split(","))
    ]


def count(minimum: int) -> Callable[[str], int]:
    """An ``argparse`` type: an integer ``>= minimum``."""
    return lambda text: _number(text, int, lambda v: v >= minimum, f"an integer >= {minimum}")


def positive(text: str) -> float:
    """An ``argparse`` type: a finite number ``> 0``."""
    return _number(text, float, lambda v: 0 < v < math.inf, "a finite number > 0")


def nonnegative(text: str) -> float:
    """An ``argparse`` type: a finite number ``>= 0``."""
    return _number(text, float, lambda v: 0 <= v < math.inf, "a finite number >= 0")


def budget(text: str) -> float:
    """An ``argparse`` type: a number of seconds ``>= 0``, ``inf`` allowed."""
    return _number(text, float, lambda v: v >= 0, "a number of seconds >= 0 (or inf)")


def fraction(text: str) -> float:
    """An ``argparse`` type: a number in the open interval ``(0, 1)``."""
    return _number(text, float, lambda v: 0 < v < 1, "a number in (0, 1)")


def add_level(parser: argparse.ArgumentParser) -> None:
    """``--level``, the confidence level of every interval (default 0.95)."""
    parser.add_argument("--level", type=fraction, default=0.95, help="confidence level")


def add_lam_or_load(parser: argparse.ArgumentParser) -> None:
    """``--lam X`` or ``--load F`` (a fraction of lambda_c): exactly one of them, which
    :func:`check_lam_or_load` checks once the arguments are parsed."""
    parser.add_argument("--lam", type=positive, default=None, help="arrival rate")
    parser.add_argument(
        "--load", type=positive, default=None, help="arrival rate as a fraction of lambda_c"
    )


def check_lam_or_load(args: argparse.Namespace) -> None:
    """A usage error unless exactly one of ``--lam`` and ``--load`` is given."""
    if (args.lam is None) == (args.load is None):
        raise UsageError("give exactly one of --lam X or --load F (a fraction of lambda_c)")


def add_size(parser: argparse.ArgumentParser, *, jobs: int, replications: int, least: int = 1):
    """``--jobs`` (per replication, at least ``least``) and ``--replications`` (at least 2)."""
    parser.add_argument(
        "--jobs",
        type=count(least),
        default=jobs,
        help="jobs per replication (default: %(default)s)",
    )
    parser.add_argument(
        "--replications",
        type=count(2),
        default=replications,
        help="independent replications (default: %(default)s)",
    )


def add_policy(parser: argparse.ArgumentParser, names: str = "") -> None:
    """``--policy NAME[:PARAM]`` (default fcfs); ``names``: the policies the help lists."""
    parser.add_argument(
        "--policy",
        default="fcfs",
        metavar="NAME[:PARAM]",
        help=f"scheduling policy{names} (default: %(default)s)",
    )


def writable_file(path: str, option: str) -> str:
    """``path`` if a file can be written there (its folder exists, it is not a folder), else a
    one-line ``ValueError`` naming ``option``: checked before the work, not after it."""
    target = os.path.abspath(path)
    folder = os.path.dirname(target)
    if os.path.isdir(target):
        raise ValueError(f"{option} {path}: is a folder, not a file")
    if not os.path.isdir(folder):
        raise ValueError(f"{option} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{option} {path}: the folder {folder} is not writable")
    return path


def writable_folder(path: str, option: str) -> str:
    """``path`` created if needed, or a one-line ``ValueError`` naming ``option``."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{option} {path}: exists and is not a folder")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{option} {path}: cannot create the folder ({err.strerror})") from None
    if not os.access(path, os.W_OK):
        raise ValueError(f"{option} {path}: the folder is not writable")
    return path


def command(family, name: str, run) -> argparse.ArgumentParser:
    """The parser of the command ``name`` of ``family`` (the subcommands of ``jaxqueue mjqm``,
    ``bf``, ...), which calls ``run(args)``: its help is the first paragraph of ``run``'s
    docstring (lower-cased first letter, no final period) and its description the rest, so
    that a command's text stands with its code."""
    head, _, description = inspect.cleandoc(run.__doc__ or "").partition("\n\n")
    head = " ".join(head.split()).rstrip(".")
    p = family.add_parser(name, help=head[:1].lower() + head[1:], description=description)
    p.set_defaults(func=run)
    return p


def mjqm_command(group, name: str, run) -> argparse.ArgumentParser:
    """The :func:`command` ``jaxqueue mjqm NAME`` with the option every MJQM command takes,
    ``--scenario NAME|FILE``."""
    p = command(group("mjqm", "multiserver-job queue (mjsre)"), name, run)
    p.add_argument(
        "--scenario",
        required=True,
        metavar="NAME|FILE",
        help=f"a scenario ({', '.join(scenario_names())}) or a TOML/JSON workload file",
    )
    return p


def workload(spec: str):
    """The multiserver-job workload of ``--scenario``: an unknown name, or a pool scenario, is
    a usage error; a file that cannot be read or is refused is a runtime error."""
    if not names_a_file(spec):
        with usage_errors():
            wl = get_scenario(spec)
    else:
        wl = get_scenario(spec)
    if not hasattr(wl, "lambda_ideal"):
        raise UsageError(f"scenario {spec!r} is not a multiserver-job workload")
    return wl


def add_common(
    parser: argparse.ArgumentParser,
    *,
    seed: bool = True,
    strict: bool = False,
    csv: bool = False,
    seed_default: int = DEFAULT_SEED,
) -> None:
    """``--json``, (for anything random) ``--seed``, (for estimates) ``--strict`` and (for
    commands that print a table of classes or points) ``--csv FILE``."""
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    if csv:
        parser.add_argument(
            "--csv",
            metavar="FILE",
            help="also write the table (one row per class or point) as CSV; needs pandas",
        )
    if seed:
        shown = (
            "" if seed_default is not None else f" (default: the file's seed, else {DEFAULT_SEED})"
        )
        parser.add_argument("--seed", type=int, default=seed_default, help=f"PRNG seed{shown}")
    if strict:
        parser.add_argument(
            "--strict",
            action="store_true",
            help=f"exit with status {EXIT_NOT_OK} when the estimate's status is not ok "
            "(the figures are still printed)",
        )


def configure(args: argparse.Namespace) -> None:
    """Process-wide settings, set here and nowhere else: float64 for the command line, a
    persistent compilation cache (``$JAXQUEUE_CACHE_DIR``, default ``~/.cache/jaxqueue/xla``;
    ``JAXQUEUE_NO_CACHE=1`` turns it off) so that repeated commands skip XLA compilation, and
    ``jax.distributed`` (with gloo collectives between CPU processes) for ``--distributed``."""
    import jax  # once a command runs: `--help` and usage errors do not load jax

    jax.config.update("jax_enable_x64", True)
    if os.environ.get("JAXQUEUE_NO_CACHE", "") not in ("1", "true", "yes"):
        default = os.path.join(os.path.expanduser("~"), ".cache", "jaxqueue", "xla")
        jax.config.update(
            "jax_compilation_cache_dir", os.environ.get("JAXQUEUE_CACHE_DIR", default)
        )
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)
    if getattr(args, "distributed", False):
        _check_distributed(args)
        _native_stdout_to_stderr()
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        timeout = args.distributed_timeout
        where = f"coordinator {args.coordinator or 'auto-detected'}"
        # XLA aborts the process (a C++ stack trace) when its own timeout passes: end first
        watchdog = threading.Timer(timeout, _give_up, (args, timeout, where))
        watchdog.daemon = True
        watchdog.start()
        try:
            jax.distributed.initialize(
                coordinator_address=args.coordinator,
                num_processes=args.num_processes,
                process_id=args.process_id,
                initialization_timeout=int(math.ceil(timeout)) + 60,
            )
        except (RuntimeError, ValueError, IndexError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(
                f"--distributed: jax.distributed.initialize failed within {timeout:g} s "
                f"({where}): {first}"
            ) from None
        finally:
            watchdog.cancel()


def _give_up(args: argparse.Namespace, timeout: float, where: str) -> None:
    """The one line of a ``--distributed`` start whose peers did not all join in time, and
    the exit (status 1) before XLA's own timeout aborts the process."""
    line = (
        f"jaxqueue: error: --distributed: not every process joined within {timeout:g} s "
        f"({where}, {args.num_processes or 'auto'} processes expected): start the same "
        "command on every process, or raise --distributed-timeout"
    )
    print(line, file=sys.stderr, flush=True)
    if getattr(args, "json", False):
        print(json.dumps({"error": line, "exit_status": EXIT_RUNTIME}), flush=True)
    sys.stdout.flush()
    os._exit(EXIT_RUNTIME)


DISTRIBUTED_TIMEOUT = 120
"""Seconds ``--distributed`` waits for every process to join before it gives up (the default
of ``--distributed-timeout``)."""


def _check_distributed(args: argparse.Namespace) -> None:
    """The ``--distributed`` options, checked before ``jax.distributed.initialize`` (which
    otherwise fails with a traceback, or waits for peers that never come)."""
    given = [args.coordinator, args.num_processes, args.process_id]
    if any(v is not None for v in given) and any(v is None for v in given):
        raise UsageError(
            "--distributed: give all of --coordinator HOST:PORT, --num-processes N and "
            "--process-id I, or none of them (cluster auto-detection)"
        )
    if args.coordinator is None:
        return
    host, _, port = args.coordinator.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--coordinator: expected HOST:PORT, got {args.coordinator!r}")
    if args.num_processes < 1 or not 0 <= args.process_id < args.num_processes:
        raise UsageError(
            f"--distributed: need --num-processes N >= 1 and 0 <= --process-id < N, got "
            f"N = {args.num_processes}, --process-id {args.process_id}"
        )


def _native_stdout_to_stderr() -> None:
    """Keep stdout for the answer: the collectives library writes connection messages to the
    process's file descriptor 1, so point that at stderr and give Python's ``sys.stdout``
    a duplicate of the original descriptor."""
    sys.stdout.flush()
    answer = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(answer, "w", buffering=1)


def _is_lead_process() -> bool:
    """Only process 0 prints when several processes run one command (``--distributed``)."""
    jax = sys.modules.get("jax")
    return jax is None or jax.process_index() == 0


def to_jsonable(obj):
    """Convert arrays / numpy scalars / nested containers into plain JSON values."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "__array__") or isinstance(obj, (np.generic,)):
        arr = np.asarray(obj)
        if arr.dtype == bool:
            return arr.tolist()
        if np.issubdtype(arr.dtype, np.integer):
            return arr.tolist()
        arr = arr.astype(float)
        if arr.ndim == 0:
            v = float(arr)
            return v if np.isfinite(v) else None
        return [to_jsonable(v) for v in arr]
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def emit(
    args: argparse.Namespace,
    obj: dict,
    table: Callable[[dict], str] | None = None,
    frame: Callable[[], object] | None = None,
) -> int:
    """Print ``obj`` as one JSON object (``--json``) or as a human-readable table (process 0
    only), write ``frame()`` (a pandas DataFrame: the result's ``to_frame()``) to ``--csv``,
    and return the command's exit status.

    An estimate whose ``status`` is not ``ok`` gets one warning line on stderr (with its
    ``status_reason``) and, under ``--strict``, the exit status :data:`EXIT_NOT_OK`.
    """
    status = obj.get("status", "ok")
    if _is_lead_process():
        if getattr(args, "csv", None) and frame is not None:
            with_all_row(frame(), obj).to_csv(args.csv, index=False)
            log(f"wrote {args.csv}")
        if getattr(args, "json", False):
            print(json.dumps(to_jsonable(obj)))
        elif table is not None:
            print(table(obj))
        else:
            print(json.dumps(to_jsonable(obj), indent=2))
    if not hasattr(args, "strict") or status == "ok":  # not an estimating command, or ok
        return 0
    if status not in STATUSES:
        raise AssertionError(f"status {status!r} is not one of {STATUSES}")
    reason = obj.get("status_reason") or "the figures are not to be trusted"
    LOGGER.warning(f"warning: status {status}: {reason}")
    return EXIT_NOT_OK if getattr(args, "strict", False) else 0


_TOTALS = {"L": "L_total", "T": "T_mean"}
"""Columns of a per-class CSV whose all-jobs figure has another name in the JSON."""


def with_all_row(df, obj: dict):
    """The per-class CSV with a last row ``class = all`` (the one convention of every CSV and
    table: classes 0-based, then ``all``): each column's all-jobs figure from ``obj`` (the
    JSON: ``NAME``, ``NAME_ci`` for ``NAME_low`` / ``NAME_high``), empty where it has none."""
    label = next((c for c in ("class", "type") if c in df.columns), None)
    if label is None or "point" in df.columns:
        return df
    row: dict = {label: "all"}
    for col in df.columns:
        base, _, end = col.rpartition("_")
        name = _TOTALS.get(col, col)
        value = obj.get(name)
        if value is not None and not isinstance(value, (str, bool)) and np.ndim(value) == 0:
            row[col] = float(value)
        elif end in ("low", "high") and np.ndim(obj.get(f"{base}_ci")) == 1:
            ci = obj[f"{base}_ci"]
            row[col] = ci[0] if end == "low" else ci[1]
    out = df.astype({label: object})
    out.loc[len(out)] = [row.get(c, np.nan) for c in out.columns]
    return out


def format_table(headers: list[str], rows: Iterable[Iterable], floatfmt: str = ".6g") -> str:
    """A plain aligned text table."""
    cells = [[h for h in headers]] + [
        [format(v, floatfmt) if isinstance(v, float) else str(v) for v in row] for row in rows
    ]
    widths = [max(len(r[j]) for r in cells) for j in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def interval(ci) -> str:
    """``[lo, hi]`` of an interval, 4 significant digits."""
    return f"[{ci[0]:.4g}, {ci[1]:.4g}]"


LOGGER = logging.getLogger("jaxqueue")
"""The command line's logger: progress and logs on stderr (process 0 only); ``-q`` shows
warnings only, ``-v`` adds debug lines."""


_BAR: contextvars.ContextVar = contextvars.ContextVar("jaxqueue_bar", default=None)
"""The live progress bar of :func:`activity`, if any (log lines are written above it)."""


class _Stderr(logging.Handler):
    """Writes to the ``sys.stderr`` of the moment (tests swap it), on process 0 only; above
    the live progress bar when there is one."""

    def emit(self, record: logging.LogRecord) -> None:
        if not _is_lead_process():
            return
        text = self.format(record)
        bar = _BAR.get()
        if bar is not None:
            bar.write(text, file=sys.stderr)
            bar.set_postfix_str(text.strip()[:60], refresh=False)
        else:
            print(text, file=sys.stderr, flush=True)


if not any(isinstance(h, _Stderr) for h in LOGGER.handlers):
    LOGGER.addHandler(_Stderr())
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False


def set_verbosity(quiet: int, verbose: int) -> None:
    """``-q``: warnings and errors only; ``-v``: also debug lines; else progress (info)."""
    LOGGER.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)


@contextlib.contextmanager
def activity(desc: str):
    """A live line on stderr while a command runs (tqdm): the elapsed time and the latest log
    line, refreshed each second by a thread that only sleeps in between (the computation is
    not slowed). Shown after 2 s on a terminal (``JAXQUEUE_PROGRESS=1``: always, at once;
    ``=0``: never), never under ``-q`` or on a process other than 0."""
    force = os.environ.get("JAXQUEUE_PROGRESS", "")
    show = force == "1" or (force != "0" and sys.stderr.isatty())
    if not show or LOGGER.getEffectiveLevel() > logging.INFO or not _is_lead_process():
        yield
        return
    from tqdm import tqdm  # only when a bar is shown: `--help` stays fast

    bar = tqdm(
        desc=desc,
        file=sys.stderr,
        bar_format="{desc}: {elapsed}{postfix}",
        delay=0 if force == "1" else 2,
        leave=False,
    )
    stop = threading.Event()
    ticker = threading.Thread(
        target=lambda: [bar.refresh() for _ in iter(lambda: stop.wait(1), True)]
    )
    ticker.daemon = True
    ticker.start()
    token = _BAR.set(bar)
    try:
        yield
    finally:
        stop.set()
        ticker.join()
        _BAR.reset(token)
        bar.close()


def on_bar():
    """A ``callable(str)`` that shows its text after the live progress bar of :func:`activity`
    (the fraction done of a run), or ``None`` when no bar is shown (the run then skips the
    work of telling it)."""
    bar = _BAR.get()
    return None if bar is None else bar.set_postfix_str


def log(msg: str) -> None:
    """Progress and logs go to stderr (process 0 only) through :data:`LOGGER` (info level)."""
    LOGGER.info(msg)


def names_a_file(spec: str) -> bool:
    """Whether a ``--pool`` / ``--scenario`` value is meant as a file (it exists, holds a path
    separator or ends in ``.json`` / ``.toml``), so that a missing one is reported as such."""
    return os.path.exists(spec) or os.sep in spec or spec.endswith((".json", ".toml"))


def read_spec(path: str) -> dict:
    """Read a JSON or TOML file into a dict (one-line errors naming the file:
    ``jaxqueue._document.read_document``, under every file reader)."""
    return read_document(path)
