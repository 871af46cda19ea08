"""``jaxqueue mjqm sample`` (Algorithm 1) and ``jaxqueue mjqm stability`` (Algorithm 2)."""

from __future__ import annotations

import argparse
import time

from ._common import (
    LOGGER,
    UsageError,
    add_common,
    add_lam_or_load,
    add_level,
    budget,
    check_lam_or_load,
    count,
    emit,
    format_table,
    fraction,
    log,
    mjqm_command,
    positive,
    workload,
)
from ._mjqm_common import classes_table, command_limit

SAMPLE_SECONDS = 40.0
"""Default time budget of ``mjqm sample``, start-up and compilation left out."""

SAMPLE_CAP = 100_000
"""Default ``--samples``: high enough that the time budget decides, so a fast case (a light
load) spends its budget narrowing the interval instead of stopping early."""


def _device() -> str:
    import jax  # loads when the command runs, not at start-up

    d = jax.devices()[0]
    return f"{d.platform}:{d.device_kind} x{jax.device_count()}"


def _exact_limit(wl) -> float | None:
    """The exact lambda_c when every law is exponential (the QBD fits in memory), else
    ``None``."""
    from ..mjqm import stability_limit  # the models load when the command runs

    if not hasattr(wl, "services"):
        return None
    try:
        return stability_limit(wl, method="exact").lambda_c
    except ValueError:
        log("[stability] no exact limit (services not all exponential or the QBD too large)")
        return None


def _exact_table(o: dict) -> str:
    rows = [
        ["lambda_c (exact, QBD saturated departure rate)", o["lambda_c"]],
        ["lambda_ideal", o["lambda_ideal"]],
    ]
    return format_table(["quantity", "value"], rows, floatfmt=".10g")


def _run_stability(args: argparse.Namespace) -> int:
    """Stability limit lambda_c: exact for exponential services, else pile growth.

    The stability limit lambda_c: exact (the saturated departure rate of the QBD) when every
    service law is exponential and the arrivals Poisson, else estimated as 1 / gamma by the pile
    growth rate (Theorem 5.1, Algorithm 2) with a confidence interval.
    """
    # jax and the models load when the command runs, not at start-up
    import jax
    import jax.numpy as jnp

    # (as jax)
    from ..mjqm import lambda_c_closed_form, pile_growth
    from ..mjqm.policies import RandomAssignment  # (as jax)

    wl = workload(args.scenario)
    t0 = time.perf_counter()
    exact = None if args.random_assignment or args.pile_growth else _exact_limit(wl)
    if exact is not None:
        out = {
            "scenario": args.scenario,
            "lambda_c": exact,
            "lambda_c_ci": [exact, exact],
            "lambda_ideal": float(wl.lambda_ideal()),
            "method": "exact",
            "status": "ok",
            "elapsed_s": time.perf_counter() - t0,
            "device": _device(),
        }
        return emit(args, out, _exact_table)
    res = pile_growth(
        wl,
        key=jax.random.key(args.seed),
        replications=args.replications,
        rel_tol=args.rel_tol,
        level=args.level,
        max_jobs=args.max_jobs,
        policy=RandomAssignment() if args.random_assignment else None,
        dtype=jnp.float32 if args.dtype == "float32" else jnp.float64,
        progress=lambda n, g, r: log(f"[stability] jobs={n} gamma={g:.6g} rel={r:.3g}"),
    )
    out = {"scenario": args.scenario, **res.as_dict(), "level": args.level}
    out["method"] = "pile-growth" if out["method"] == "pile" else out["method"]
    out["status"] = "ok" if res.converged else "unconverged"
    if not res.converged:
        out["status_reason"] = (
            f"mjqm stability: the relative half-width did not reach --rel-tol {args.rel_tol:g} "
            f"within --max-jobs {args.max_jobs}"
        )
    out["lambda_c_closed_form"] = lambda_c_closed_form(wl)
    out["elapsed_s"] = time.perf_counter() - t0
    out["device"] = _device()

    def table(o):
        rows = [
            ["lambda_c", o["lambda_c"]],
            ["lambda_c_ci", f"[{o['lambda_c_ci'][0]:.6g}, {o['lambda_c_ci'][1]:.6g}]"],
            ["lambda_ideal", o["lambda_ideal"]],
            [
                "lambda_c (eq. 8)",
                "n/a" if o["lambda_c_closed_form"] is None else o["lambda_c_closed_form"],
            ],
            ["jobs x replications", f"{o['jobs']} x {o['replications']}"],
            ["converged", str(o["converged"])],
        ]
        return format_table(["quantity", "value"], rows)

    return emit(args, out, table)


def _log_bias_test(t) -> None:
    what = f"M_{2 * t.ell} - M_{t.ell}" if t.kind == "loynes" else f"X({t.ell}) - X({t.ell // 2})"
    log(
        f"[sample] bias test at batch horizon {t.ell}: mean wait of {what} = {t.diff:.4g} "
        f"(se {t.diff_se:.2g}), bias bound {t.bound:.4g} vs half-width {t.half_width:.4g}: "
        f"{'pass' if t.ok else 'double'}"
    )


def _status_reason(o: dict) -> str:
    """Why a ``mjqm sample`` result is not ok."""
    if o["status"] == "unconverged":
        why = (
            f"{o['n_unconverged']} of {o['samples']} samples hit --max-ell or the work "
            "budget --max-work before meeting Algorithm 1's stopping rule (lower bounds)"
        )
    elif not o["bias_tests"]:
        why = "Algorithm 1 alone (--no-bias-control): the bias of the samples is not bounded"
    else:
        why = (
            f"the horizon bias is not controlled: the batch test still failed at horizon "
            f"{o['ell_batch']} (--max-ell / --max-work); bias bound {o['bias_bound']:.4g} "
            "added to the upper ends of the intervals"
        )
    return f"mjqm sample: {why}"


def _run_sample(args: argparse.Namespace) -> int:
    """Steady-state metrics from backward sub-perfect samples (Algorithm 1).

    Independent sub-perfect samples of the stationary workload and the Palm metrics of Section 6
    with confidence intervals. The batch horizon doubles until the bound of the downward bias of
    the mean wait (from paired differences between horizons ell and 2 ell) is below --bias-tol
    of the half-width; it is added to the upper ends of the mean intervals. status: ok,
    unconverged (samples capped by --max-ell or --max-work: lower bounds, intervals open above),
    biased (bias not controlled at --max-ell or --max-work); a non-ok status prints a warning
    (--strict: exit 3).
    """
    # jax and the models load when the command runs, not at start-up
    import jax
    import jax.numpy as jnp

    from ..mjqm import palm_metrics, sample_backward  # (as jax)
    from ..mjqm.engines.recurrence import horizon_floor  # (as jax)
    from ..mjqm.options import BiasControl, Budget  # (as jax)

    check_lam_or_load(args)
    if args.ell0 is not None and args.ell0 > args.max_ell:
        raise UsageError(
            f"need 1 <= ell0 <= max_ell, got --ell0 {args.ell0} > --max-ell {args.max_ell}"
        )
    wl = workload(args.scenario)
    key = jax.random.key(args.seed)
    limit = command_limit(wl, "fcfs", key, lam=args.lam, override=args.override, tag="sample")
    lam = args.lam
    if lam is None and limit.lambda_c is None:
        raise ValueError(f"mjqm sample --load: {limit.describe()}; give --lam")
    if lam is None:
        lam = args.load * limit.lambda_c
        log(f"[sample] lam = {args.load:g} lambda_c = {lam:.6g}")
    floor = horizon_floor(wl, lam, limit)
    if args.ell0 is None and args.max_ell < floor:
        LOGGER.warning(
            f"warning: --max-ell {args.max_ell} is below the horizon floor {floor} of this "
            f"workload at lam {lam:.6g} (8 jobs of the rarest class, 4 relaxation times): the "
            f"first horizon is cut to {max(args.max_ell // 2, 1)} jobs and the samples may "
            "stay unconverged; raise --max-ell"
        )
    t0 = time.perf_counter()
    S = sample_backward(
        wl,
        lam,
        args.samples,
        key=key,
        ell0=args.ell0,
        dtype=jnp.float32 if args.dtype == "float32" else jnp.float64,
        limit=limit,
        override=args.override,
        bias_control=None if args.no_bias_control else BiasControl(args.bias_tol, args.level),
        budget=Budget(
            max_ell=args.max_ell,
            max_work=args.max_work,
            max_seconds=None if args.max_seconds == float("inf") else args.max_seconds,
        ),
        progress=lambda ell, n_act, n_done: log(f"[sample] ell={ell} active={n_act} done={n_done}"),
        on_test=_log_bias_test,
    )
    elapsed = time.perf_counter() - t0
    out = palm_metrics(wl, S, level=args.level)
    out = {"scenario": args.scenario, **out, "elapsed_s": elapsed, "device": _device()}
    out["stability"] = limit.summary()
    out["horizon_floor"] = floor
    if out["status"] != "ok":
        out["status_reason"] = _status_reason(out)
        if args.ell0 is None and args.max_ell < floor:
            out["status_reason"] += f" (--max-ell below the horizon floor {floor})"

    def table(o):
        head = classes_table(o)
        return (
            f"{head}\nall jobs: wait_mean {o['wait_mean']:.6g} [{o['wait_mean_ci'][0]:.6g}, "
            f"{o['wait_mean_ci'][1]:.6g}]; idle servers {o['idle_servers']:.4g}, HOL idle "
            f"{o['hol_idle_servers']:.4g}; status {o['status']} ({o['samples']} samples, "
            f"bias bound {o['bias_bound']:.3g} in the interval, batch horizon {o['ell_batch']}"
            f"{', later samples at ' + str(o['ell_more']) if o['ell_more'] else ''})"
        )

    from .._tables import metrics_frame  # pandas loads only for a table

    return emit(args, out, table, frame=lambda: metrics_frame(out))


def register(top, group) -> None:
    """Add ``mjqm sample`` and ``mjqm stability``."""
    p = mjqm_command(group, "stability", _run_stability)
    p.add_argument("--rel-tol", type=fraction, default=0.01, help="relative half-width target")
    p.add_argument("--replications", type=count(2), default=32, help="independent piles")
    add_level(p)
    p.add_argument("--max-jobs", type=count(1), default=1 << 24, help="cap on jobs per pile")
    p.add_argument(
        "--random-assignment", action="store_true", help="limit of the random-assignment system"
    )
    p.add_argument(
        "--pile-growth",
        action="store_true",
        help="estimate by pile growth even when the exact limit is available",
    )
    p.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        default="float32",
        help="pile dtype (renormalised: float32 is safe)",
    )
    add_common(p, strict=True)

    p = mjqm_command(group, "sample", _run_sample)
    add_lam_or_load(p)
    p.add_argument(
        "--samples",
        type=count(2),
        default=SAMPLE_CAP,
        help="number of samples at most: by default the time budget (--max-seconds) decides "
        "(default: %(default)d)",
    )
    p.add_argument(
        "--max-seconds",
        type=budget,
        default=SAMPLE_SECONDS,
        help="time budget: the bias control runs on a pilot of 1000 samples (to its end, "
        "whatever the budget), then more samples are drawn while the budget lasts, up to "
        "--samples, at the shortest tested horizon whose bias bound stays within --bias-tol "
        "(ell_more); 'inf' draws all --samples in the bias control "
        "(default: %(default)g)",
    )
    p.add_argument(
        "--ell0",
        type=count(1),
        default=None,
        help="first horizon (jobs); default from the workload: 8 jobs of the rarest class, 4 "
        "relaxation times at the load",
    )
    p.add_argument(
        "--max-ell",
        type=count(1),
        default=1 << 22,
        help="cap on the horizon (per sample and batch)",
    )
    p.add_argument(
        "--bias-tol",
        type=positive,
        default=0.25,
        help="double the batch horizon until the bias bound is below this fraction of the "
        "half-width of the mean-wait interval",
    )
    p.add_argument(
        "--max-work",
        type=count(1),
        default=None,
        help="budget of sample-jobs of Algorithm 1 and the batch doublings (default 2^39 / "
        "servers); the status is 'unconverged' when samples "
        "are still doubling there, 'biased' when the bias test still fails there",
    )
    p.add_argument(
        "--no-bias-control",
        action="store_true",
        help="Algorithm 1 alone, without the batch bias test (status biased: the bias of the "
        "sub-perfect samples is then not bounded)",
    )
    add_level(p)
    p.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        default="float32",
        help="workload state (float32: exact-equality stopping reliable, half the memory "
        "traffic of float64; metrics in float64)",
    )
    p.add_argument("--override", action="store_true", help="skip the stability check")
    add_common(p, strict=True, csv=True)
