"""``jaxqueue mjqm simulate``: forward MJSRE simulation of a scenario (``mjsre``)."""

from __future__ import annotations

import argparse
import time

from ._common import (
    UsageError,
    add_common,
    add_level,
    add_policy,
    add_size,
    count,
    emit,
    interval,
    log,
    mjqm_command,
    on_bar,
    positive,
    usage_errors,
    workload,
)
from ._mjqm_common import classes_table, command_limit
from ._mjqm_policies import quantiles_text, simulate_with_policy
from ._traces import add_trace_options, simulate_trace


def tail_points(text: str) -> tuple[str, ...]:
    """An ``argparse`` type: comma-separated finite times ``>= 0`` (kept as given: they are
    the JSON keys)."""
    points = tuple(t.strip() for t in text.split(","))
    try:
        ok = points and all(0 <= float(t) < float("inf") for t in points)
    except ValueError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated times >= 0, as 1,10; got {text!r}"
        )
    return points


def _table(out: dict) -> str:
    head = (
        f"scenario {out['scenario']}  lam={out['lam']:.6g}  (lambda_ideal "
        f"{out['lambda_ideal']:.6g})  {out['replications']} x {out['jobs']} jobs on "
        f"{out['device']}\n"
    )
    tail = (
        f"\nall jobs: wait_mean {out['wait_mean']:.6g} "
        f"{interval(out['wait_mean_ci'])}"
        f"\nidle servers {out['idle_servers']:.6g} (expected s - lam E[alpha sigma] = "
        f"{out['idle_servers_expected']:.6g}), HOL idle servers {out['hol_idle_servers']:.6g}"
        f"\nmean number in system {out['number_in_system']:.6g}"
        f"\nresponse {quantiles_text(out)}\nwait {quantiles_text(out, 'wait')}"
    )
    return head + classes_table(out) + tail


def _add_response(out: dict) -> None:
    """FCFS response (sojourn) times: the system times of the MJSRE run; the overall interval is
    the wait's shifted by the mean service time of the measured jobs."""
    out["policy"] = "fcfs"
    for c in out["classes"]:
        c["response_mean"] = c["system_time_mean"]
        c["response_mean_ci"] = c["system_time_mean_ci"]
    shift = out["system_time_mean"] - out["wait_mean"]
    out["response_mean"] = out["system_time_mean"]
    out["response_mean_ci"] = [x + shift for x in out["wait_mean_ci"]]


def _simulate(args: argparse.Namespace) -> int:
    """Forward MJSRE simulation with per-class waiting times and waste.

    Forward simulation of the FCFS multiserver-job queue (F-MJSRE) over independent
    replications: per-class waiting-time mean (with CI), variance and quantiles, idle and
    HOL-idle servers. Each replication starts from a backward sample; a run that fails its
    stationarity checks (drift of the mean wait, the idle-server identity, enough effective
    waits per replication when the start is not known to be stationary) is continued with twice
    the jobs within --max-seconds, else its status is nonstationary.
    """
    # jax and the models load when the command runs, not at start-up
    import jax
    import jax.numpy as jnp

    # (as jax)
    from ..mjqm import simulate_steady
    from ..mjqm._estimators import MIN_EFFECTIVE, MIN_REPLICATIONS
    from ..mjqm.policies import parse_policy

    if args.trace is not None:
        return simulate_trace(args)
    if args.scenario is None or args.lam is None:
        raise UsageError("the arguments --scenario and --lam are required (or --trace LOG)")
    if args.servers is not None or args.compare_recorded:
        raise UsageError("--servers and --compare-recorded apply to --trace")
    with usage_errors():
        fcfs = parse_policy(args.policy).name == "fcfs"
    if fcfs and args.max_buffer is not None:
        raise UsageError("--max-buffer applies to the event engine (a --policy other than fcfs)")
    wl = workload(args.scenario)
    if not fcfs:
        return simulate_with_policy(args, wl)
    key = jax.random.key(args.seed)
    limit = command_limit(wl, "fcfs", key, lam=args.lam, override=args.override, tag="simulate")
    args.start = args.start or "backward"
    args.max_seconds = args.max_seconds or 120.0
    dtype = {"float32": jnp.float32, "float64": jnp.float64}[args.dtype or "float32"]
    log(
        f"simulating {args.scenario} at lam={args.lam}: {args.replications} replications x "
        f"{args.jobs} jobs on {jax.devices()[0].platform} x{len(jax.devices())}, start "
        f"{args.start}, budget {args.max_seconds:g} s"
    )
    t0 = time.perf_counter()
    res = simulate_steady(
        wl,
        args.lam,
        key=key,
        n_jobs=args.jobs,
        n_replications=args.replications,
        start=args.start,
        max_seconds=args.max_seconds,
        dtype=dtype,
        level=args.level,
        limit=limit,
        override=args.override,
        progress=log,
        fraction=on_bar(),
    )
    out = res.as_dict(tails=args.tail)
    _add_response(out)
    out["stability"] = limit.summary()
    if res.status == "unconverged" and res.n_replications < MIN_REPLICATIONS:
        out["status_reason"] = (
            f"mjqm simulate: {res.n_replications} replications, fewer than the "
            f"{MIN_REPLICATIONS} an interval of heavy-tailed waits needs to be trusted; raise "
            f"--replications"
        )
    elif res.status == "unconverged":
        out["status_reason"] = (
            f"mjqm simulate: a class has waiting times in fewer than 2 replications after "
            f"{len(res.rounds)} round(s) ({res.n_jobs} jobs per replication in the last): no "
            f"interval for it; raise --jobs or --max-seconds"
        )
    elif res.status != "ok":
        out["status_reason"] = (
            f"mjqm simulate: after {len(res.rounds)} round(s) ({res.n_jobs} jobs per "
            f"replication in the last) the run still fails a stationarity check (mean wait "
            f"growth {res.wait_growth:.4g} between halves, idle-server identity t = "
            f"{res.idle_z:.2f}, {res.n_eff:.3g} effective waits per replication where a start "
            f"not known to be stationary needs {MIN_EFFECTIVE:g}); lam may be too close to "
            f"lambda_c for --max-seconds "
            f"{args.max_seconds:g}: raise it or --jobs, or use mjqm exact / mjqm sample"
        )
    out["elapsed_s"] = time.perf_counter() - t0
    out["seed"] = args.seed
    return emit(args, out, _table, frame=res.to_frame)


def register(top, group) -> None:
    """Add ``jaxqueue mjqm simulate``."""
    p = mjqm_command(group, "simulate", _simulate)
    for action in p._actions:  # a --trace replay takes neither (checked in _simulate)
        if action.dest == "scenario":
            action.required = False
    p.add_argument("--lam", type=positive, default=None, help="arrival rate (required)")
    add_size(p, jobs=20_000, replications=256)
    p.add_argument(
        "--start",
        choices=("backward", "empty"),
        default=None,
        help="initial states: independent backward samples (Algorithm 1; one resource type "
        "without specific servers, else empty) or the empty system (fcfs only; default: "
        "backward)",
    )
    p.add_argument(
        "--max-seconds",
        type=positive,
        default=None,
        help="time budget: a run failing its stationarity checks is continued with twice the "
        "jobs while the budget allows (fcfs only; default: 120)",
    )
    add_policy(
        p,
        ": fcfs (the MJSRE scan), first-fit, window:W, preemptive-first-fit, msf, "
        "server-filling, easy-backfilling (the event engine; starts empty, warm-up jobs // 5)",
    )
    p.add_argument(
        "--tail",
        type=tail_points,
        default=(),
        metavar="T1,T2",
        help="times t: adds response_tail and wait_tail, P(T > t) and P(W > t) with intervals "
        "(keys as given)",
    )
    p.add_argument(
        "--max-buffer",
        type=count(1),
        default=None,
        help="event engine: most jobs held per replication (default: 4096)",
    )
    p.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        default=None,
        help="fcfs: float32 (default) or float64",
    )
    add_level(p)
    p.add_argument(
        "--override", action="store_true", help="simulate even beyond a known stability limit"
    )
    add_common(p, strict=True, csv=True)
    add_trace_options(p)  # after every option whose default it marks (--seed)
