"""Job logs on the command line: ``jaxqueue workload fit LOG --out FILE.toml`` (a workload
fitted to a log, :func:`jaxqueue.traces.fit`) and the replay behind ``jaxqueue mjqm simulate
--trace LOG`` (:func:`jaxqueue.traces.replay`)."""

from __future__ import annotations

import argparse
import time

from ._common import (
    UsageError,
    add_common,
    command,
    count,
    emit,
    format_table,
    log,
    usage_errors,
    writable_file,
)

_FIT_COLUMNS = ("cores", "prob", "law", "mean", "fitted_mean", "scv", "fitted_scv", "p99")


def _fit_table(out: dict) -> str:
    head = (
        f"{out['trace']}: {out['jobs']} jobs on {out['servers']} servers "
        f"({out['servers_from']}), lam {out['lam']:.6g} (Poisson; inter-arrival scv "
        f"{out['interarrival_scv']:.3g})\n{out['rule']}\n"
    )
    rows = [
        (
            c["cores"],
            c["prob"],
            c["law"]["law"],
            c["mean"],
            c["fitted_mean"],
            c["scv"],
            c["fitted_scv"],
            c["p99"],
            c["fitted_p99"],
            c["work_share"],
            c["ks"],
        )
        for c in out["classes"]
    ]
    cols = [*_FIT_COLUMNS, "fitted_p99", "work_share", "ks"]
    return head + format_table(cols, rows) + f"\nwrote {out['out']}"


def _fit(args: argparse.Namespace) -> int:
    """Fit a workload file to a job log (SWF or CSV).

    Fit a multiserver-job workload to a job log (the Standard Workload Format, .swf, or a CSV
    with submit, cores, runtime columns): classes by core count (a count held by fewer than
    --min-share of the jobs merged into the next larger one, at most --max-classes), a
    phase-type service law per class by its mean and scv (exponential, Erlang, two-phase
    hyperexponential: the exact solver applies), the arrival rate (Poisson), and a report: per
    class the log's and the fitted mean, scv and p99, the share of the work and the
    Kolmogorov-Smirnov distance. Writes an ordinary workload file (--scenario FILE of every
    command).
    """
    from .. import traces  # the models load when the command runs (jax)

    writable_file(args.out, "--out")
    with usage_errors():
        if args.laws not in traces.LAWS or args.laws == "empirical":
            raise ValueError(f"--laws: choose ph or exponential, got {args.laws!r}")
    res = traces.fit(
        args.log,
        max_classes=args.max_classes,
        laws=args.laws,
        min_share=args.min_share,
        servers=args.servers,
    )
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(res.to_toml())
    out = res.as_dict()
    out["out"] = args.out
    log(f"wrote {args.out}")
    return emit(args, out, _fit_table)


def _share(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        x = -1.0
    if not 0.0 <= x < 1.0:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1), got {text!r}")
    return x


def _add_servers(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """``--servers``, the machine size of a job log (``workload fit`` and ``--trace``)."""
    p.add_argument(
        "--servers",
        type=count(1),
        default=None,
        help=f"{prefix}the machine size (default: the log's MaxProcs header)",
    )


def register(top, group) -> None:
    """Add ``jaxqueue workload fit``."""
    p = command(group("workload", "workloads from cluster job logs"), "fit", _fit)
    p.add_argument("log", metavar="LOG", help="the job log (.swf or .csv, optionally .gz)")
    p.add_argument("--out", required=True, metavar="FILE.toml", help="the workload file")
    _add_servers(p)
    p.add_argument("--max-classes", type=count(1), default=8, help="at most this many classes")
    p.add_argument(
        "--min-share",
        type=_share,
        default=0.01,
        help="a core count held by fewer than this share of the jobs is merged upwards "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--laws",
        default="ph",
        help="ph (exponential, Erlang or hyperexponential by the scv; default) or exponential",
    )
    add_common(p, seed=False)


def _replay_table(out: dict) -> str:
    head = (
        f"{out['trace']}: {out['jobs']} jobs replayed under {out['policy']} on "
        f"{out['servers']} servers (one exact replay)\n"
    )
    rows = [
        (c["cores"], c["prob"], c["wait_mean"], c["wait_p90"], c["response_mean"])
        for c in out["classes"]
    ]
    table = format_table(["cores", "prob", "wait_mean", "wait_p90", "response_mean"], rows)
    tail = (
        f"\nall jobs: wait_mean {out['wait_mean']:.6g}, quantiles "
        + ", ".join(f"{k}: {v:.6g}" for k, v in out["wait_quantiles"].items())
        + f"\nutilisation {out['utilisation']:.4g}, idle servers {out['idle_servers']:.6g}, "
        f"HOL idle servers (waste) {out['hol_idle_servers']:.6g}"
    )
    if "recorded" in out:
        r = out["recorded"]
        tail += (
            f"\nrecorded waits: {r['compared']} jobs compared, {r['differ']} start at another "
            f"time; recorded wait mean {r['recorded_wait_mean']}, replayed "
            f"{r['replayed_wait_mean']}"
        )
    return head + table + tail


def _quantiles(text: str | None):
    if text is None:
        return (0.5, 0.9, 0.99)
    try:
        qs = tuple(float(q) for q in text.split(","))
    except ValueError:
        qs = ()
    if not qs or not all(0.0 < q < 1.0 for q in qs):
        raise UsageError(f"--quantiles: numbers in (0, 1) separated by commas, got {text!r}")
    return qs


class _Unset(int):
    """A default the command line did not give (an ``int``: the other commands read it as
    before), so that a replay can tell it from a given value."""


class _UnsetTuple(tuple):
    """As :class:`_Unset`, for ``--tail``'s empty default."""


# what an exact replay of a log cannot honour, and why
_REFUSED = {
    "seed": "a replay draws no random numbers",
    "replications": "a replay is one run of the log",
    "start": "a replay starts from an empty machine at the log's first job",
    "max_seconds": "a replay runs the whole log (use --jobs N for its first N jobs)",
    "override": "a replay checks no load against a stability limit",
}


def _given(args: argparse.Namespace, dest: str) -> bool:
    value = getattr(args, dest, None)
    return value is not None and value is not False and not isinstance(value, _Unset | _UnsetTuple)


def _check_trace_options(args: argparse.Namespace) -> None:
    """Refuse, in one line naming it, an option of ``mjqm simulate`` that a replay cannot
    honour (:data:`_REFUSED`, ``--scenario``, ``--lam``, ``--dtype float32``)."""
    for option in ("scenario", "lam"):
        if getattr(args, option, None) is not None:
            raise UsageError(f"--trace replays the log: --{option} does not apply")
    for dest, why in _REFUSED.items():
        if _given(args, dest):
            flag = "--" + dest.replace("_", "-")
            raise UsageError(f"--trace: {flag} does not apply ({why})")
    if getattr(args, "dtype", None) == "float32":
        raise UsageError(
            "--trace: --dtype float32 does not apply (a replay keeps the log's "
            "absolute times in float64)"
        )


def simulate_trace(args: argparse.Namespace) -> int:
    """``jaxqueue mjqm simulate --trace LOG``: the replay of the log under ``--policy``; of its
    first ``--jobs`` jobs where given, with ``--tail`` and ``--level`` as a policy run; the
    options that do not apply refused in one line (:func:`_check_trace_options`)."""
    # the models load when the command runs (jax)
    from .. import traces
    from ..mjqm.policies import parse_policy
    from ..traces._requested import REQUESTED

    _check_trace_options(args)
    with usage_errors():
        requested = args.policy.strip() == REQUESTED
        policy = REQUESTED if requested else parse_policy(args.policy)
    label = REQUESTED if requested else policy.label
    qs = _quantiles(getattr(args, "quantiles", None))
    t0 = time.perf_counter()
    jobs = int(args.jobs) if _given(args, "jobs") else None
    first = f" (its first {jobs} jobs that ran)" if jobs else ""
    log(f"replaying {args.trace}{first} under {label}")
    kwargs = {"servers": args.servers, "jobs": jobs}
    if args.max_buffer is not None:
        kwargs["max_buffer"] = args.max_buffer
    res = traces.replay(args.trace, policy, progress=log, **kwargs)
    if jobs and len(res.wait) < jobs:
        log(f"--jobs {jobs}: the log has {len(res.wait)} jobs that ran; all replayed")
    level = float(getattr(args, "level", 0.95))
    tails = tuple(getattr(args, "tail", ()) or ())
    out = res.as_dict(quantiles=qs, compare=args.compare_recorded, tails=tails, level=level)
    out["elapsed_s"] = time.perf_counter() - t0
    return emit(args, out, _replay_table, frame=res.to_frame)


def add_trace_options(p: argparse.ArgumentParser) -> None:
    """``--trace``, ``--servers`` and ``--compare-recorded`` of ``mjqm simulate`` (added after
    its other options: their defaults are marked, so that a replay tells them from given
    values)."""
    for action in p._actions:
        if action.dest in ("jobs", "seed", *_REFUSED) and type(action.default) is int:
            action.default = _Unset(action.default)
        elif action.dest == "tail" and type(action.default) is tuple:
            action.default = _UnsetTuple(action.default)
    p.add_argument(
        "--trace",
        metavar="LOG",
        default=None,
        help="replay a job log (.swf or .csv) instead of simulating a scenario: its own "
        "arrivals, cores and run times under --policy, one exact replay (--jobs N: its first "
        "N jobs; --tail, --level as for a policy run; no --scenario, --lam, --seed, "
        "--replications, --start, --max-seconds, --override); --policy "
        "easy-backfilling:estimate=requested: EASY backfilling planned with the log's "
        "requested times",
    )
    _add_servers(p, "--trace: ")
    p.add_argument(
        "--compare-recorded",
        action="store_true",
        help="--trace: set the replayed waits beside those the log recorded and count the "
        "jobs that start at another time",
    )
