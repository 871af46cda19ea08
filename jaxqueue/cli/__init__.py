"""The ``jaxqueue`` command: the only place that prints, reads files or sets configuration.

Each command family lives in its own module ``jaxqueue/cli/_<family>.py`` exposing
``register(top, group)``: ``top`` is the top-level subparsers object, ``group(name, help)``
returns (creating once) the subparsers of a family such as ``mjqm`` or ``bf``. Each leaf
parser sets ``func=run_function``; ``run_function(args)`` returns the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback

from .. import __version__
from ._common import (
    DISTRIBUTED_TIMEOUT,
    Parser,
    UsageError,
    activity,
    configure,
    positive,
    set_verbosity,
    writable_file,
)

# Families, in the order they appear in `jaxqueue --help`.
_MODULES = (
    "_bf",
    "_mjqm",
    "_mjqm_backward",
    "_mjqm_exact",
    "_mjqm_sensitivity",
    "_mjqm_policies",
    "_sched",
    "_network",
    "_optimize",
    "_reproduce",
    "_sweep",
    "_traces",
    "_demo",
)


_OWN_PROGRESS = ("sweep", "demo")
"""Commands that show their own progress (a bar over points; the demo's sections)."""


def _add_global(parser: argparse.ArgumentParser, default) -> None:
    """``--debug``, ``-q`` and ``-v``: on the top-level parser (``default``: their defaults)
    and on every command (``default=SUPPRESS``, so a command does not undo them)."""
    parser.add_argument(
        "--debug", action="store_true", default=default or False, help="show tracebacks"
    )
    parser.add_argument(
        "-q", "--quiet", action="count", default=default or 0, help="warnings and errors only"
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=default or 0, help="debug lines too"
    )


def _leaves(parser: argparse.ArgumentParser):
    """Every command's parser (those without sub-commands)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield parser
        return
    for sub in subs:
        for child in dict.fromkeys(sub.choices.values()):
            yield from _leaves(child)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="jaxqueue",
        description="Differentiable JAX numerics for clusters modelled as queues. Exit status: "
        "0 ok, 1 runtime error (a file or a model refuses the input, or the work fails), 2 "
        "usage error (the command line is not well formed: an unknown option or name, a value "
        "of the wrong form, count or range, inline values included), 3 an estimate whose "
        "status is not ok under --strict.",
    )
    parser.add_argument("--version", action="version", version=f"jaxqueue {__version__}")
    _add_global(parser, None)
    dist = parser.add_argument_group(
        "several hosts",
        "run one process per host with the same command; the batch axes (replications, "
        "samples) are spread over the devices of all processes and process 0 prints the answer",
    )
    dist.add_argument(
        "--distributed",
        action="store_true",
        help="call jax.distributed.initialize (cluster auto-detection unless the options below "
        "are given)",
    )
    dist.add_argument("--coordinator", metavar="HOST:PORT", help="address of process 0")
    dist.add_argument("--num-processes", type=int, metavar="N", help="number of processes")
    dist.add_argument("--process-id", type=int, metavar="I", help="this process's index")
    dist.add_argument(
        "--distributed-timeout",
        type=positive,
        default=DISTRIBUTED_TIMEOUT,
        metavar="S",
        help="seconds to wait for every process to join; then one line and exit status 1",
    )
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}

    def group(name: str, help: str) -> argparse._SubParsersAction:
        if name not in groups:
            p = top.add_parser(name, help=help, description=help)
            groups[name] = p.add_subparsers(dest="subcommand", required=True, metavar="ACTION")
        return groups[name]

    for mod in _MODULES:
        importlib.import_module(f"{__name__}.{mod}").register(top, group)
    for leaf in _leaves(parser):
        _add_global(leaf, argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit status (0 ok, 1 runtime error, 2 usage error, 3 a
    non-ok estimate under ``--strict``). Errors are one line on stderr (and, under ``--json``,
    a JSON object ``{"error": ..., "exit_status": ...}`` on stdout); ``--debug`` adds the
    traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json, debug = "--json" in argv, "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help, --version
        return int(stop.code or 0)
    except UsageError as err:
        return _fail(err, f"{err.prog}: error: {err}", 2, as_json, debug)
    set_verbosity(args.quiet, args.verbose)
    try:
        if getattr(args, "csv", None):
            writable_file(args.csv, "--csv")
        configure(args)
        if args.command in _OWN_PROGRESS:
            return int(args.func(args) or 0)
        words = [args.command, getattr(args, "subcommand", None)]
        with activity(" ".join(["jaxqueue", *filter(None, words)])):
            return int(args.func(args) or 0)
    except UsageError as err:
        return _fail(err, f"jaxqueue: error: {err}", 2, as_json, debug)
    except (ValueError, OSError) as err:  # a file, a folder or a model refuses the input
        message = str(err) if isinstance(err, ValueError) else _os_message(err)
        return _fail(err, f"jaxqueue: error: {message}", 1, as_json, debug)
    except KeyboardInterrupt as err:
        return _fail(err, "jaxqueue: error: interrupted", 130, as_json, debug)
    except Exception as err:  # noqa: BLE001 - one line, not a traceback (--debug shows it)
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        line = f"jaxqueue: error: {type(err).__name__}: {first} (--debug shows the traceback)"
        return _fail(err, line, 1, as_json, debug)


def _fail(err: BaseException, line: str, status: int, as_json: bool, debug: bool) -> int:
    """Report an error: the traceback under ``--debug``, one line on stderr, and under
    ``--json`` the JSON object ``{"error": LINE, "exit_status": STATUS}`` on stdout."""
    if debug:
        traceback.print_exception(err, file=sys.stderr)
    print(line, file=sys.stderr, flush=True)
    if as_json:
        print(json.dumps({"error": line, "exit_status": status}), flush=True)
    return status


def _os_message(err: OSError) -> str:
    """``PATH: REASON`` for a file system error."""
    return f"{err.filename}: {err.strerror}" if err.filename else str(err)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
