"""``jaxqueue mjqm sensitivity``: derivatives of a stationary metric with intervals
(:func:`jaxqueue.mjqm.sensitivity`), with the exact derivatives beside them where the exact
solver reaches (FCFS, phase-type laws)."""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from ._common import (
    add_common,
    add_level,
    add_policy,
    add_size,
    emit,
    interval,
    log,
    mjqm_command,
    positive,
    usage_errors,
    workload,
)
from ._mjqm_common import command_limit

_PARAMS = ("lam", "scale", "logits")


def _wrt(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    if not names or any(n not in _PARAMS for n in names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated names from lam, scale, logits, got {text!r}"
        )
    return names


def _entry(est, method, i=None, exact=None) -> dict:
    m, lo, hi = (float(x if i is None else x[i]) for x in (est.mean, est.low, est.high))
    out = {"value": m, "ci": [lo, hi], "method": method}
    if exact is not None:
        out["exact"] = float(exact if i is None else exact[i])
    return out


def sensitivity_dict(wl, res, exact=None) -> dict:
    """The JSON object of ``mjqm sensitivity`` (keys of ``docs``' contract)."""
    C = wl.n_classes
    ex = exact or {}
    der = {}
    for name, est in res.derivatives.items():
        e = ex.get(name)
        if name == "lam":
            der[name] = _entry(est, res.methods[name], exact=e)
        else:
            der[name] = [_entry(est, res.methods[name], i, e) for i in range(C)]
    classes = []
    for c in range(C):
        row = {
            "cores": int(wl.cores[c][0]),
            "prob": float(wl.probs[c]),
            "value": float(res.value_class.mean[c]),
            "value_ci": [float(res.value_class.low[c]), float(res.value_class.high[c])],
            "derivatives": {},
        }
        for name, est in res.derivatives_class.items():
            if name == "lam":
                row["derivatives"][name] = _entry(est, res.methods[name], c)
            else:
                row["derivatives"][name] = [
                    {
                        "value": float(est.mean[c, j]),
                        "ci": [float(est.low[c, j]), float(est.high[c, j])],
                        "method": res.methods[name],
                    }
                    for j in range(C)
                ]
        classes.append(row)
    out = {
        "metric": res.metric,
        "lam": res.lam,
        "value": float(res.value.mean),
        "value_ci": [float(res.value.low), float(res.value.high)],
        "derivatives": der,
        "status": str(res.status),
        "classes": classes,
        "replications": res.replications,
        "jobs": res.n_jobs,
        "warmup": res.warmup,
        "start": res.start,
        "level": res.level,
    }
    if exact is not None:
        out["exact_value"] = exact["value"]
    if res.status != "ok":
        out["status_reason"] = res.status_reason()
    return out


def _table(o: dict) -> str:
    lines = [f"{o['metric']} = {o['value']:.6g} {interval(o['value_ci'])}  status {o['status']}"]
    for name, d in o["derivatives"].items():
        for i, e in enumerate([d] if isinstance(d, dict) else d):
            label = name if isinstance(d, dict) else f"{name}[{i}]"
            exact = f"  exact {e['exact']:.6g}" if "exact" in e else ""
            lines.append(
                f"d/d{label:<10} {e['value']:>12.6g} {interval(e['ci'])}  {e['method']}{exact}"
            )
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    """Derivatives of a stationary metric with intervals (lam, service scales, class mix).

    Steady-state derivatives of the mean wait, the mean response or a wait quantile with respect
    to the arrival rate, each class's service-time scale (at 1) and the class logits (p =
    softmax(logits)), with confidence intervals: pathwise (IPA) on the FCFS recurrence from
    backward samples, measure-valued for the logits, common-random-number central
    differences otherwise. Exponential FCFS workloads also get the exact derivatives ("exact").
    The command line runs 160,000 jobs per replication by default, ten times the Python API's:
    a derivative remembers congestion longer than the wait does.
    """
    import jax  # jax only once a command runs: the CLI starts without it

    # the models load when the command runs
    from ..mjqm import exact_sensitivity, sensitivity
    from ..mjqm._sensitivity import parse_metric
    from ..mjqm.policies import FCFS, parse_policy

    with usage_errors():
        parse_metric(args.metric)
        pol = parse_policy(args.policy)
    wl = workload(args.scenario)
    key = jax.random.key(args.seed)
    t0 = time.perf_counter()
    fcfs = isinstance(pol, FCFS)
    limit = command_limit(
        wl, "fcfs" if fcfs else pol, key, lam=args.lam, override=args.override, tag="sensitivity"
    )
    # the exact derivatives compile and run beside the simulation (XLA releases the GIL)
    with ThreadPoolExecutor(max_workers=1) as pool:
        exact = None
        if fcfs and args.metric in ("wait_mean", "response_mean"):
            exact = pool.submit(exact_sensitivity, wl, args.lam, args.metric, limit=limit)
        res = sensitivity(
            wl,
            args.lam,
            None if fcfs else pol,
            wrt=args.wrt or (_PARAMS if fcfs else ("lam", "logits")),
            metric=args.metric,
            key=key,
            n_jobs=args.jobs,
            n_replications=args.replications,
            rel_precision=args.rel_precision,
            level=args.level,
            limit=limit,
            override=args.override,
        )
        if exact is not None:
            try:
                exact = exact.result()
            except ValueError as e:  # no phase form or beyond the solver's size: no exact column
                log(f"[sensitivity] no exact derivatives: {e}")
                exact = None
    out = {"scenario": args.scenario, **sensitivity_dict(wl, res, exact)}
    out["stability"] = limit.summary()
    out["seed"] = args.seed
    out["elapsed_s"] = time.perf_counter() - t0
    return emit(args, out, _table)


def register(top, group) -> None:
    """Add ``jaxqueue mjqm sensitivity``."""
    p = mjqm_command(group, "sensitivity", _run)
    p.add_argument("--lam", type=positive, required=True, help="arrival rate")
    add_policy(p)
    p.add_argument(
        "--wrt",
        type=_wrt,
        default=None,
        metavar="P[,P...]",
        help="parameters: lam, scale, logits (default: all under fcfs; lam, logits under "
        "another policy, where scale has no estimator)",
    )
    p.add_argument(
        "--metric",
        default="wait_mean",
        help="wait_mean, response_mean, wait_pNN (e.g. wait_p99) or wait_quantile(q) "
        "(default: %(default)s)",
    )
    add_size(p, jobs=160_000, replications=64, least=8)
    p.add_argument(
        "--rel-precision",
        type=positive,
        default=None,
        help="ok needs every half-width within this fraction of its value (default: none)",
    )
    add_level(p)
    p.add_argument(
        "--override", action="store_true", help="run even beyond a known stability limit"
    )
    add_common(p, strict=True)
