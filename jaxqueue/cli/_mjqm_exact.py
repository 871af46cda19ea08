"""``jaxqueue mjqm exact``: the exact FCFS multiserver-job queue for phase-type services."""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from ._common import (
    add_common,
    add_lam_or_load,
    check_lam_or_load,
    emit,
    format_table,
    log,
    mjqm_command,
    number_list,
    workload,
)

quantile_list = number_list("numbers in (0, 1) separated by commas", lambda v: 0 < v < 1)
time_list = number_list("finite numbers >= 0 separated by commas", lambda v: 0 <= v < math.inf)


def _waits(res, wl, quantiles, tails) -> tuple[dict, list[dict]]:
    """``p_wait``, ``wait_quantiles`` and ``wait_tail`` of all jobs and of every class."""
    dist = res.wait_distribution(quantiles=[v for _, v in quantiles], times=[v for _, v in tails])
    out = []
    for cls in [None, *range(wl.n_classes)]:
        o = {"p_wait": float(dist.p_wait(cls))}
        if quantiles:
            o["wait_quantiles"] = {k: float(dist.quantile(v, cls)) for k, v in quantiles}
        if tails:
            o["wait_tail"] = {k: float(dist.tail(v, cls)) for k, v in tails}
            o["wait_tail_error"] = max(float(dist.tail_error(v, cls)) for _, v in tails)
        out.append(o)
    return out[0], out[1:]


def exact_dict(wl, lam: float, res=None, quantiles=(), tails=()) -> dict:
    """The JSON of ``mjqm exact`` for a workload at one arrival rate (refusals raise); ``res``:
    the ``exact(wl, lam)`` already computed; ``quantiles`` and ``tails``: ``(text, value)``
    pairs (``--quantiles``, ``--tail``) adding the waiting-time law."""
    from ..mjqm import exact  # the models load when the command runs

    res = exact(wl, lam) if res is None else res
    probs = np.asarray(wl.probs, dtype=float)
    means = np.asarray(wl.mean_service(), dtype=float)
    classes = [
        {
            "cores": int(wl.cores[i][0]),
            "prob": float(probs[i]),
            "mean_service": float(means[i]),
            "wait_mean": float(res.wait_mean_class[i]),
            "response_mean": float(res.wait_mean_class[i] + means[i]),
            "jobs_waiting": float(res.jobs_waiting_class[i]),
            "jobs_in_service": float(res.jobs_service_class[i]),
        }
        for i in range(wl.n_classes)
    ]
    top = {}
    if quantiles or tails:
        top, per_class = _waits(res, wl, quantiles, tails)
        for c, extra in zip(classes, per_class, strict=True):
            c.update(extra)
    return {
        "lam": float(lam),
        "method": "exact",
        "status": res.status,
        "wait_mean": float(res.wait_mean),
        "response_mean": float(res.wait_mean + (probs * means).sum()),
        "classes": classes,
        "jobs_mean": float(res.jobs_mean),
        "jobs_waiting_mean": float(res.jobs_waiting_mean),
        "p_wait": float(res.p_wait),
        "idle_servers": float(res.idle_servers),
        "hol_idle_servers": float(res.hol_idle_servers),
        "lambda_c": float(res.lambda_c),
        "lambda_ideal": float(wl.lambda_ideal()),
        "load": float(lam / res.lambda_c),
        "phases": int(res.phases),
        "levels": int(res.levels),
        **top,
    }


def _table(o: dict) -> str:
    rows = [
        (i, c["cores"], c["prob"], c["mean_service"], c["wait_mean"], c["response_mean"])
        for i, c in enumerate(o["classes"])
    ]
    head = (
        f"scenario {o['scenario']}  lam={o['lam']:.6g}  ({o['load']:.1%} of lambda_c = "
        f"{o['lambda_c']:.8g}; lambda_ideal {o['lambda_ideal']:.6g})  exact QBD, "
        f"{o['phases']} phases x {o['levels']} boundary levels\n"
    )
    head_row = ["class", "cores", "prob", "mean_service", "wait_mean", "response_mean"]
    table = format_table(head_row, rows)
    tail = (
        f"\nall jobs: wait_mean {o['wait_mean']:.10g}, P(wait > 0) {o['p_wait']:.6g}, mean "
        f"number in system {o['jobs_mean']:.6g}\nidle servers {o['idle_servers']:.6g}, HOL idle "
        f"servers (idle while someone waits) {o['hol_idle_servers']:.6g}"
    )
    for key, label in (("wait_quantiles", "wait quantiles"), ("wait_tail", "P(wait > t)")):
        if key in o:
            rows = [("all", o["p_wait"], *o[key].values())]
            rows += [(c["cores"], c["p_wait"], *c[key].values()) for c in o["classes"]]
            cols = ["cores", "P(wait > 0)", *(f"{label} {k}" for k in o[key])]
            tail += "\n" + format_table(cols, rows)
    return head + table + tail


def _run(args: argparse.Namespace) -> int:
    """Exact waits for exponential and phase-type services (level-dependent QBD).

    Exact stationary metrics of the FCFS multiserver-job queue with Poisson arrivals and
    exponential or phase-type (Erlang, hyperexponential, Coxian) service times, any number of
    classes: per-class mean waits, P(wait > 0), idle and HOL-idle servers, and the exact
    stability limit lambda_c.
    """
    from ..mjqm import exact, exact_lambda_c, exact_size  # the models load when the command runs

    check_lam_or_load(args)
    wl = workload(args.scenario)
    t0 = time.perf_counter()
    lam = args.lam if args.lam is not None else args.load * float(exact_lambda_c(wl))
    res = exact(wl, lam)
    waits = {"quantiles": args.quantiles or (), "tails": args.tail or ()}
    out = {"scenario": args.scenario, **exact_dict(wl, lam, res, **waits)}
    out["elapsed_s"] = time.perf_counter() - t0
    size = exact_size(wl)
    log(
        f"[exact] {size['phases']} phases per level, {size['levels']} boundary levels, about "
        f"{size['bytes'] / 2**20:.0f} MB, {out['elapsed_s']:.2f} s (compilation included)"
    )
    emit(args, out, _table, frame=lambda: res.to_frame(wl))
    return 0


def register(top, group) -> None:
    """Add ``jaxqueue mjqm exact``."""
    p = mjqm_command(group, "exact", _run)
    add_lam_or_load(p)
    p.add_argument(
        "--quantiles",
        type=quantile_list,
        default=None,
        metavar="Q[,Q...]",
        help="waiting-time quantiles, e.g. 0.5,0.9,0.99 (exact, all jobs and every class)",
    )
    p.add_argument(
        "--tail",
        type=time_list,
        default=None,
        metavar="T[,T...]",
        help="times t for P(wait > t), e.g. 1,10,100",
    )
    add_common(p, seed=False, csv=True)
