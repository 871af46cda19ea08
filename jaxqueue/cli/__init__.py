"""The ``jaxqueue`` command: the only place that prints, reads files or sets configuration.

Each command family lives in its own module ``jaxqueue/cli/_<family>.py`` exposing
``register(top, group)``: ``top`` is the top-level subparsers object, ``group(name, help)``
returns (creating once) the subparsers of a family such as ``mjqm`` or ``bf``. Each leaf
parser sets ``func=run_function``; ``run_function(args)`` returns the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Families, in the order they appear in `jaxqueue --help`.
_MODULES = (
    "_bf",
    "_mjqm",
    "_mjqm_backward",
    "_mjqm_exact",
    "_mjqm_policies",
    "_sched",
    "_network",
    "_optimize",
    "_reproduce",
    "_demo",
)


def build_parser() -> argparse.ArgumentParser:
    from ._common import Parser

    parser = Parser(
        prog="jaxqueue",
        description="Differentiable JAX numerics for clusters modelled as queues.",
    )
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
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}

    def group(name: str, help: str) -> argparse._SubParsersAction:
        if name not in groups:
            p = top.add_parser(name, help=help, description=help)
            groups[name] = p.add_subparsers(dest="subcommand", required=True, metavar="ACTION")
        return groups[name]

    for mod in _MODULES:
        importlib.import_module(f"{__name__}.{mod}").register(top, group)
    return parser


def main(argv: list[str] | None = None) -> int:
    from ._common import configure

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help (0) or a bad option (2, its one line printed)
        return int(stop.code or 0)
    try:
        configure(args)
        return int(args.func(args) or 0)
    except (ValueError, OSError) as err:  # bad input, a file or folder that cannot be used
        message = str(err) if isinstance(err, ValueError) else _os_message(err)
        print(f"jaxqueue: error: {message}", file=sys.stderr)
        return 2


def _os_message(err: OSError) -> str:
    """``PATH: REASON`` for a file system error."""
    return f"{err.filename}: {err.strerror}" if err.filename else str(err)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
