"""``jaxqueue mjqm simulate --policy NAME`` (the event engine) and ``jaxqueue mjqm compare``:
the MJQM under the scheduling policies of ``jaxqueue.mjqm.policies``."""

from __future__ import annotations

import argparse
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor

from ._common import (
    UsageError,
    add_common,
    add_size,
    emit,
    format_table,
    interval,
    log,
    mjqm_command,
    on_bar,
    usage_errors,
    workload,
    writable_file,
)
from ._mjqm_common import classes_table, command_limit

STATUS_REASON = {
    "overflow": "an arrival found the job buffer full at --max-buffer jobs: the load is too "
    "high for this policy or the buffer too small (raise --max-buffer)",
    "nonstationary": "the second half of the measured jobs waits significantly longer than the "
    "first (or the event cap was reached): lam may be beyond this policy's stability limit, "
    "or the run too short (raise --jobs)",
}


def stability_text(st: dict) -> str:
    """The stability limit of a policy run's JSON (``{"lambda_c", "ci", "method"}``) in
    words: ``unknown``, ``x (method)`` when exact, ``x [lo, hi] (method)`` when estimated."""
    if st["lambda_c"] is None:
        return "unknown"
    lo, hi = st["ci"]
    ci = "" if lo == hi else f" {interval(st['ci'])}"
    return f"{st['lambda_c']:.5g}{ci} ({st['method']})"


def quantiles_text(out: dict, kind: str = "response") -> str:
    """``p50 x [lo, hi], p90 ...``: the quantiles of a run's JSON block with their intervals."""
    qs, ci = out[f"{kind}_quantiles"], out[f"{kind}_quantiles_ci"]
    return ", ".join(f"p{float(k) * 100:g} {v:.4g} {interval(ci[k])}" for k, v in qs.items())


def _table(out: dict) -> str:
    limit = stability_text(out["stability"])
    head = (
        f"scenario {out['scenario']}  policy {out['policy']}  lam={out['lam']:.6g}  stability "
        f"limit {limit}  {out['replications']} x {out['jobs']} jobs\n"
    )
    tails = "".join(
        f"\n{kind} P(> {t}) {p:.4g} {interval(out[f'{kind}_tail_ci'][t])}"
        for kind in ("response", "wait")
        for t, p in out.get(f"{kind}_tail", {}).items()
    )
    tail = (
        f"\nall jobs: response_mean {out['response_mean']:.6g} "
        f"[{out['response_mean_ci'][0]:.4g}, {out['response_mean_ci'][1]:.4g}], wait_mean "
        f"{out['wait_mean']:.6g}\nresponse {quantiles_text(out)}"
        f"\nwait {quantiles_text(out, 'wait')}"
        f"{tails}\nidle servers {out['idle_servers']:.6g}, HOL idle servers "
        f"{out['hol_idle_servers']:.6g}, mean number in system {out['number_in_system']:.6g}"
        f"\nstatus {out['status']}"
    )
    cols = ("response_mean", "wait_mean", "response_p90", "response_p99")
    rows = {"classes": [_with_p(c) for c in out["classes"]]}
    return head + classes_table(rows, cols) + tail


def _with_p(c: dict) -> dict:
    """A class block with ``response_p90`` and ``response_p99`` for the table."""
    q = c["response_quantiles"]
    return c | {"response_p90": q.get("0.9", "-"), "response_p99": q.get("0.99", "-")}


def simulate_with_policy(args: argparse.Namespace, wl) -> int:
    """``mjqm simulate --policy NAME`` for a policy other than fcfs: the event engine."""
    # jax and the models load when the command runs, not at start-up
    import jax

    # (as jax)
    from ..mjqm import metrics_frame, simulate_policy
    from ..mjqm._stability import check_load
    from ..mjqm.policies import parse_policy

    fcfs_only = [
        opt
        for opt, value in (
            ("--start", args.start),
            ("--dtype", args.dtype),
            ("--max-seconds", args.max_seconds),
        )
        if value is not None
    ]
    if fcfs_only:
        raise UsageError(
            f"{', '.join(fcfs_only)} apply to --policy fcfs (the MJSRE scan) only; the event "
            "engine starts empty, runs in float64 and has no time budget"
        )
    t0 = time.perf_counter()
    key = jax.random.key(args.seed)
    limit = command_limit(
        wl, args.policy, key, lam=args.lam, override=args.override, tag="simulate"
    )
    # a refused load says so in its one line, before the run's line
    check_load(wl, args.lam, limit=limit, policy=parse_policy(args.policy), override=args.override)
    log(
        f"event simulation of {args.scenario} at lam={args.lam}: {args.policy}, "
        f"{args.replications} replications x {args.jobs} jobs"
    )
    res = simulate_policy(
        wl,
        args.lam,
        args.policy,
        key=key,
        n_jobs=args.jobs,
        n_replications=args.replications,
        max_buffer=args.max_buffer or 4096,
        level=args.level,
        limit=limit,
        override=args.override,
        progress=on_bar(),  # the jobs done on the live line (without one: one call)
    )
    out = res.as_dict(wl, tails=args.tail)
    if res.status != "ok":
        out["status_reason"] = f"mjqm simulate --policy {args.policy}: " + STATUS_REASON.get(
            res.status, res.status_reason()
        )
    out["elapsed_s"] = time.perf_counter() - t0
    out["seed"] = args.seed
    return emit(args, out, _table, frame=lambda: metrics_frame(res, wl))


def _compare(args: argparse.Namespace) -> int:
    """Mean response time of several scheduling policies at several loads.

    Event simulation of the multiserver-job queue under each policy at each load (a fraction of
    the FCFS stability limit lambda_c): one table of mean response times with intervals and
    statuses, each policy's stability limit (where a method is known), and optionally a figure.
    fcfs is solved exactly instead (the QBD of mjqm exact) where every service law is
    exponential and the arrivals Poisson.
    """
    # jax and the models load when the command runs, not at start-up
    import jax

    # (as jax)
    from ..mjqm.engines.events import check_workload
    from ..mjqm.policies import parse_policy

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not policies:
        raise UsageError(f"--policies names no policy: {args.policies!r}")
    with usage_errors():
        for p in policies:
            parse_policy(p)
    loads = _fractions(args.loads)
    if args.plot:
        writable_file(args.plot, "--plot")
    wl = workload(args.scenario)
    check_workload(wl)
    key = jax.random.key(args.seed)
    fcfs = command_limit(wl, "fcfs", key, tag="compare")
    lam_c = fcfs.lambda_c
    out = {
        "scenario": wl.name,
        "loads": loads,
        "load_reference": "lambda_c of fcfs",
        "lambda_c": lam_c,
        "lambda_ideal": float(wl.lambda_ideal()),
        "jobs": args.jobs,
        "replications": args.replications,
    }

    bar = on_bar()  # (read here: the policies' threads do not see the command's context)

    def one(name: str) -> dict:
        pol = parse_policy(name)
        limit = fcfs if pol.label == "fcfs" else command_limit(wl, pol, key, tag="compare")
        rows = _exact_fcfs_rows(wl, loads, lam_c, args.quantiles) if pol.label == "fcfs" else None
        if rows is None:
            rows = _policy_rows(wl, pol, name, loads, lam_c, key, args, limit, bar)
        summary = limit.summary()
        return {"policy": name, "stability": summary | {"lambda_c_ci": summary["ci"]}, "rows": rows}

    # one policy's compile overlaps another's run (XLA compiles on one core)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    with ThreadPoolExecutor(max_workers=min(len(policies), cores or 1)) as pool:
        out["policies"] = list(pool.map(one, policies))
    statuses = [r["status"] for p in out["policies"] for r in p["rows"]]
    bad = [s for s in statuses if s != "ok"]
    out["status"] = "ok" if not bad else ("unstable" if "unstable" in bad else bad[0])
    if bad:
        out["status_reason"] = (
            f"mjqm compare: {len(bad)} of {len(statuses)} runs are not ok "
            f"({', '.join(sorted(set(bad)))}); their rows carry no figure or an untrusted one"
        )
    if args.plot:
        _plot(out, args.plot)
    table = lambda o: _compare_table(o, args.quantiles)  # noqa: E731
    return emit(args, out, table, frame=lambda: compare_frame(out))


def _exact_fcfs_rows(wl, loads, lam_c, quantiles: bool = True) -> list[dict] | None:
    """The rows of fcfs from the exact QBD where it applies (Poisson arrivals, exponential
    services, within its size limits; ``None`` otherwise): ``method`` ``"exact"``, the
    intervals of width zero, a load at or beyond ``lambda_c`` ``unstable``; with ``quantiles``
    the quantiles of the wait and of the response time too."""
    # the models load when the command runs, not at start-up
    from ..dist import Exponential
    from ..mjqm import exact

    if not (wl.is_poisson and all(isinstance(law, Exponential) for law in wl.services)):
        return None
    rows = []
    for x in loads:
        lam = x * lam_c
        if lam >= lam_c:
            rows.append({"load": x, "lam": lam, "status": "unstable", "method": "exact"})
            continue
        log(f"compare: fcfs at {x:g} lambda_c (lam = {lam:.6g}), exact")
        try:
            res = exact(wl, lam)
        except ValueError:  # beyond the solver's size limits: simulate instead
            return None
        rows.append(_exact_row(wl, x, lam, res, quantiles))
    return rows


def _exact_row(wl, x: float, lam: float, res, quantiles: bool) -> dict:
    """One exact row: the means and idle servers of the QBD; with ``quantiles`` also the wait
    quantiles of its waiting-time law and the response time's from
    :func:`_response_quantiles` (the law costs more than the means)."""
    # numpy and the models load when the command runs, not at start-up
    import numpy as np

    from ..mjqm._estimators import QUANTILES, quantile_key  # (with the models)

    probs = np.asarray(wl.probs, float)
    means = np.asarray(wl.mean_service(), float)
    r = float(res.wait_mean) + float(probs @ means)
    row = {
        "load": x,
        "lam": lam,
        "method": "exact",
        "response_mean": r,
        "response_mean_ci": [r, r],
        "wait_mean": float(res.wait_mean),
        "idle_servers": float(res.idle_servers),
        "status": str(res.status),
    }
    if not quantiles:
        return row
    dist = res.wait_distribution(quantiles=(*QUANTILES, 0.999))
    wait = {quantile_key(q): float(dist.quantile(q)) for q in QUANTILES}
    upper = float(dist.quantile(0.999)) + 8.0 * float(means.max())
    try:  # the steps computed for the wait's quantiles usually reach the response's
        resp = _response_quantiles(
            dist, probs, means, QUANTILES, min(upper, float(dist.t_reliable()))
        )
    except ValueError:
        dist = res.wait_distribution(quantiles=(0.999,), times=(upper,))  # steps reaching upper
        resp = _response_quantiles(dist, probs, means, QUANTILES, upper)
    return row | {
        "response_quantiles": resp,
        "response_quantiles_ci": {k: [v, v] for k, v in resp.items()},
        "wait_quantiles": wait,
        "wait_quantiles_ci": {k: [v, v] for k, v in wait.items()},
    }


def _response_quantiles(dist, probs, means, levels, upper: float, steps: int = 4000) -> dict:
    """Quantiles of the FCFS response time ``T = W + S`` from the exact wait law ``dist``
    (a job's FCFS wait does not depend on its own service time; ``S`` exponential of its
    class's mean ``m_c``): ``P(T_c > t) = e^{-t/m_c} + int_0^t e^{-(t-y)/m_c} P(W_c > y) dy /
    m_c``, the integral by the trapezoid rule on ``steps`` intervals of ``[0, upper]`` (one
    recursion in ``t``), each quantile interpolated between grid points. ``upper``: where
    ``P(T > upper)`` is below every ``1 - q``."""
    # numpy, scipy and the models load when the command runs, not at start-up
    import numpy as np
    from scipy.signal import lfilter
    from scipy.stats import poisson

    from ..mjqm._estimators import quantile_key  # (with the models)

    u = np.asarray(dist.u, float)[:, :-1]  # per class, P(W > t) = sum_k Poisson(k; rate t) u_k
    t = np.linspace(0.0, upper, steps + 1)
    h = upper / steps
    k = np.arange(u.shape[0])
    rate = float(dist.rate)
    pmf = lambda x: poisson.pmf(k[None, :], rate * x[:, None])  # noqa: E731
    blocks = [pmf(t[i : i + 500]) @ u for i in range(0, t.size, 500)]
    tail_w = np.concatenate(blocks)
    tail = np.zeros_like(t)
    for c, (p, m) in enumerate(zip(probs, means, strict=True)):
        decay = np.exp(-h / m)
        f = tail_w[:, c] / m
        step = np.concatenate([[0.0], 0.5 * h * (decay * f[:-1] + f[1:])])
        conv = lfilter([1.0], [1.0, -decay], step)  # conv[i] = decay conv[i - 1] + step[i]
        tail += p * (np.exp(-t / m) + conv)
    out = {}
    for q in levels:
        i = int(np.argmax(tail <= 1.0 - q))  # the first grid point at or below 1 - q
        if i == 0 or tail[i] > 1.0 - q:
            raise ValueError("compare: the response time's law needs a larger upper end")
        a, b = tail[i - 1], tail[i]
        out[quantile_key(q)] = float(t[i - 1] + h * (a - (1.0 - q)) / (a - b))
    return out


def compare_frame(out: dict):
    """The table of ``mjqm compare``: one row per policy and load."""
    from .._tables import rows  # pandas loads only for a table

    return rows([{"policy": p["policy"], **r} for p in out["policies"] for r in p["rows"]])


def _policy_rows(wl, pol, name, loads, lam_c, key, args, limit, bar=None) -> list[dict]:
    """The rows of one policy of ``mjqm compare``, one per load (``unstable`` without a run at
    or beyond its stability limit ``limit``, computed once); the loads it runs side by side in
    one kernel call (``simulate_loads``: the numbers of a run per load), the jobs done told to
    ``bar`` (:func:`~._common.on_bar`) if given."""
    # the models load when the command runs, not at start-up
    from ..mjqm import UnstableLoadError
    from ..mjqm._stability import check_load
    from ..mjqm.engines.events import simulate_loads

    rows: list[dict] = []
    run = []  # the rows simulated: (index, load, lam)
    for x in loads:
        lam = x * lam_c
        rows.append({"load": x, "lam": lam, "status": "unstable"})
        try:
            check_load(wl, lam, limit=limit, policy=pol)
        except UnstableLoadError:  # at or beyond lambda_ideal, a closed form or the limit
            continue
        run.append((len(rows) - 1, x, lam))
    if run:
        lams = [lam for _, _, lam in run]
        at = ", ".join(f"{x:g}" for _, x, _ in run)
        log(f"compare: {name} at {at} lambda_c (lam = {', '.join(f'{v:.6g}' for v in lams)})")
        results = simulate_loads(
            wl,
            lams,
            pol,
            key=key,
            n_jobs=args.jobs,
            n_replications=args.replications,
            limit=limit,
            progress=bar,
        )
        keep = ("response_mean", "response_mean_ci", "wait_mean", "idle_servers", "status")
        tails = ("response_quantiles", "response_quantiles_ci", "wait_quantiles")
        for (i, x, lam), res in zip(run, results, strict=True):
            d = res.as_dict(wl)
            rows[i] = {
                "load": x,
                "lam": lam,
                "method": "simulation",
                **{k: d[k] for k in keep + tails + ("wait_quantiles_ci",)},
            }
    return rows


def _fractions(text: str) -> list[float]:
    try:
        loads = [float(x) for x in text.split(",")]
    except ValueError:
        raise UsageError(f"--loads must be comma-separated numbers, got {text!r}") from None
    if not loads or any(not (0 < x < math.inf) for x in loads):
        raise UsageError(f"--loads must be positive fractions of lambda_c, got {text!r}")
    return loads


def _compare_table(out: dict, quantiles: bool = False) -> str:
    """The table of ``mjqm compare``: a row per policy and load, the policy's stability limit
    (value, interval where estimated, method); with ``quantiles`` the response time's p50,
    p90 and p99 with the interval of p99."""
    rows = []
    qs = ("0.5", "0.9", "0.99")
    for p in out["policies"]:
        limit = stability_text(p["stability"])
        for r in p["rows"]:
            if "response_mean" in r:
                exact = r.get("method") == "exact"  # no interval: the QBD's value
                row = [p["policy"], r["load"], r["lam"], r["response_mean"]]
                row.append("exact" if exact else interval(r["response_mean_ci"]))
                if quantiles:
                    rq, rci = r["response_quantiles"], r["response_quantiles_ci"]
                    row += [rq[q] for q in qs] + ["exact" if exact else interval(rci["0.99"])]
            else:
                row = [p["policy"], r["load"], r["lam"], "-", "-"] + ["-"] * (4 * quantiles)
            rows.append((*row, r["status"], limit))
    head = (
        f"scenario {out['scenario']}: response time by policy; loads are fractions of "
        f"lambda_c (fcfs) = {out['lambda_c']:.6g}; lambda_ideal {out['lambda_ideal']:.6g}; "
        f"a load at or beyond a policy's stability limit is not simulated (unstable); CI "
        "'exact': fcfs from the exact QBD (exponential services), not simulated\n"
    )
    cols = ["policy", "load", "lam", "response_mean", "CI"]
    cols += ["p50", "p90", "p99", "p99 CI"] if quantiles else []
    return head + format_table([*cols, "status", "stability limit"], rows)


def _plot(out: dict, path: str) -> None:
    from matplotlib.figure import Figure  # no pyplot: no global backend switch

    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.add_subplot()
    for p in out["policies"]:  # trusted rows only; the others are listed under the figure
        pts = [r for r in p["rows"] if r["status"] == "ok"]
        if not pts:
            continue
        x = [r["lam"] for r in pts]
        y = [r["response_mean"] for r in pts]
        err = [
            [r["response_mean"] - r["response_mean_ci"][0] for r in pts],
            [r["response_mean_ci"][1] - r["response_mean"] for r in pts],
        ]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=p["policy"])
    ax.axvline(out["lambda_c"], color="grey", ls=":", label="lambda_c (fcfs)")
    ax.set_xlabel("arrival rate lam")
    ax.set_ylabel("mean response time")
    ax.set_yscale("log")
    left_out = [
        f"{p['policy']} at {r['load']:g} ({r['status']})"
        for p in out["policies"]
        for r in p["rows"]
        if r["status"] != "ok"
    ]
    ax.set_title(f"{out['scenario']}: policies")
    if left_out:
        fig.text(0.01, 0.01, "not shown: " + ", ".join(left_out), fontsize=6)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=120)


def register(top, group) -> None:
    """Add ``jaxqueue mjqm compare``."""
    p = mjqm_command(group, "compare", _compare)
    p.add_argument(
        "--policies",
        default="fcfs,first-fit,msf,server-filling",
        help="comma-separated policies, NAME[:PARAM] (default: %(default)s)",
    )
    p.add_argument(
        "--loads",
        default="0.5,0.7,0.9",
        help="comma-separated fractions of lambda_c of fcfs (default: %(default)s)",
    )
    add_size(p, jobs=20_000, replications=64, least=10)
    p.add_argument("--plot", metavar="FILE.png", help="write a figure of the table")
    p.add_argument(
        "--quantiles",
        action="store_true",
        help="print the response time's p50, p90, p99 (with the interval of p99) in the table "
        "(the JSON always carries response_quantiles and wait_quantiles with intervals)",
    )
    add_common(p, strict=True, csv=True)
