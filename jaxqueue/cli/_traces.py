"""Job logs on the command line: ``jaxqueue workload fit LOG --out FILE.toml`` (a workload
fitted to a log, :func:`jaxqueue.traces.fit`) and the replay behind ``jaxqueue mjqm simulate
--trace LOG`` (:func:`jaxqueue.traces.replay`)."""

from __future__ import annotations

import argparse
import time

from ._common import (
    UsageError,
    add_common,
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


def register(top, group) -> None:
    """Add ``jaxqueue workload fit``."""
    p = group("workload", "workloads from cluster job logs").add_parser(
        "fit",
        help="fit a workload file to a job log (SWF or CSV)",
        description="Fit a multiserver-job workload to a job log (the Standard Workload Format, "
        ".swf, or a CSV with submit, cores, runtime columns): classes by core count (a count "
        "held by fewer than --min-share of the jobs merged into the next larger one, at most "
        "--max-classes), a phase-type service law per class by its mean and scv "
        "(exponential, Erlang, two-phase hyperexponential: the exact solver applies), the "
        "arrival rate (Poisson), and a report: per class the log's and the fitted mean, scv "
        "and p99, the share of the work and the Kolmogorov-Smirnov distance. Writes an "
        "ordinary workload file (--scenario FILE of every command).",
    )
    p.add_argument("log", metavar="LOG", help="the job log (.swf or .csv, optionally .gz)")
    p.add_argument("--out", required=True, metavar="FILE.toml", help="the workload file")
    p.add_argument(
        "--servers",
        type=count(1),
        default=None,
        help="the machine size (default: the log's MaxProcs header)",
    )
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
    p.set_defaults(func=_fit)


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


def simulate_trace(args: argparse.Namespace) -> int:
    """``jaxqueue mjqm simulate --trace LOG``: the replay of the log under ``--policy``."""
    # the models load when the command runs (jax)
    from .. import traces
    from ..mjqm.policies import parse_policy

    for option in ("scenario", "lam"):
        if getattr(args, option, None) is not None:
            raise UsageError(f"--trace replays the log: --{option} does not apply")
    with usage_errors():
        policy = parse_policy(args.policy)
    qs = _quantiles(getattr(args, "quantiles", None))
    t0 = time.perf_counter()
    log(f"replaying {args.trace} under {policy.label}")
    kwargs = {"servers": args.servers}
    if args.max_buffer is not None:
        kwargs["max_buffer"] = args.max_buffer
    res = traces.replay(args.trace, policy, progress=log, **kwargs)
    out = res.as_dict(quantiles=qs, compare=args.compare_recorded)
    out["elapsed_s"] = time.perf_counter() - t0
    return emit(args, out, _replay_table, frame=res.to_frame)


def add_trace_options(p: argparse.ArgumentParser) -> None:
    """``--trace``, ``--servers`` and ``--compare-recorded`` of ``mjqm simulate``."""
    p.add_argument(
        "--trace",
        metavar="LOG",
        default=None,
        help="replay a job log (.swf or .csv) instead of simulating a scenario: its own "
        "arrivals, cores and run times under --policy, one exact replay (no --scenario, "
        "--lam)",
    )
    p.add_argument(
        "--servers",
        type=count(1),
        default=None,
        help="--trace: the machine size (default: the log's MaxProcs header)",
    )
    p.add_argument(
        "--compare-recorded",
        action="store_true",
        help="--trace: set the replayed waits beside those the log recorded and count the "
        "jobs that start at another time",
    )
