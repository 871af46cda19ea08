"""Steady-state sensitivities of the MJQM with intervals (:func:`sensitivity`).

Derivatives of a stationary metric (mean wait, mean response, a wait quantile) with respect to
the arrival rate ``lam``, a per-class service-time scale (class ``i``'s service times times
``scale_i``, at 1) and the class logits (``p = softmax(logits)``, at ``log p``). Replication
``r`` runs the jobs of the counter-based uniforms ``(key, r, n)`` whatever the parameters
(common random numbers), each through the recurrence (``mjsre`` eq. (2), ``run_jobs``) from a
sub-perfect backward sample (Algorithm 1): values and derivatives are stationary from the
first job (the start's derivative is carried in: ``_sensitivity_start.py``). Methods:

* ``pathwise`` (IPA) for ``lam`` and ``scale`` with FCFS and a mean metric: the waits are
  Lipschitz in the inputs, forward-mode autodiff through the scan;
* ``measure-valued`` for the logits with a mean metric: one job's class changed, until the
  changed path couples with the original (``_sensitivity_mvd.py``);
* ``crn-difference`` otherwise (quantiles; policies without a recurrence, run by the event
  engine): central differences with common random numbers (a backward start moved along its
  derivative; for the logits, plus the start's score ``E[f sum_n (e_{c_n} - p)]``).

Intervals: Student t over the replications (measure-valued: ``mean_ci(shape=True)``). The
status is ``ok`` only when the start was a stationary sample whose replay gave it back (else
``biased``), the measured halves show no drift, there are ``MIN_REPLICATIONS`` replications,
every class change of the measure-valued derivative coupled within its horizon (else
``biased``) and, with ``rel_precision``, every interval is within that fraction of its value.
:func:`exact_sensitivity` differentiates the exact QBD.
"""

from __future__ import annotations

import functools
import math
from concurrent.futures import ThreadPoolExecutor

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._jit import jit_per_platform
from .._random import job_uniforms
from ..stats import (
    Estimate,
    Result,
    Status,
    drift,
    effective_samples,
    judge,
    mean_ci,
    quantile_ci,
    quantile_from_hist,
)
from ._estimators import RULES
from ._exact import scaled_wait_mean
from ._inputs import jobs_from_uniforms, n_uniforms
from ._sensitivity_mvd import logit_derivative
from ._sensitivity_start import start_derivative
from ._stability import check_load
from ._workload import Workload
from .engines.events import replication_sums
from .engines.recurrence import run_jobs, sample_backward
from .options import Coupling, Differences, Start
from .policies import FCFS, parse_policy

__all__ = ["Sensitivity", "sensitivity", "exact_sensitivity", "parse_metric"]

PARAMS = ("lam", "scale", "logits")

_REPLAY_TOL = 1e-9
"""Largest relative difference between a replayed backward start and its sample."""

_STEP = {"lam": 0.02, "scale": 0.02, "logits": 0.05}
"""Default relative (``lam``) or absolute central-difference steps."""


def parse_metric(metric: str) -> tuple[str, float | None]:
    """``("mean", None)`` / ``("response", None)`` / ``("quantile", q)`` for ``wait_mean``,
    ``response_mean``, ``wait_pNN`` or ``wait_quantile(q)``.

    Raises:
        ValueError: another name.
    """
    if metric == "wait_mean":
        return "wait", None
    if metric == "response_mean":
        return "response", None
    q = None
    if metric.startswith("wait_quantile(") and metric.endswith(")"):
        q = metric[len("wait_quantile(") : -1]
    elif metric.startswith("wait_p") and metric[6:].replace(".", "", 1).isdigit():
        q = str(float(metric[6:]) / 100)
    try:
        qv = float(q) if q is not None else math.nan
    except ValueError:
        qv = math.nan
    if not 0.0 < qv < 1.0:
        raise ValueError(
            f"metric: expected wait_mean, response_mean, wait_pNN or wait_quantile(q) with "
            f"0 < q < 1, got {metric!r}"
        )
    return "quantile", qv


class Sensitivity(Result):
    """Derivatives of a stationary metric with intervals (:func:`sensitivity`).

    Attributes:
        metric: the metric's name. lam: the arrival rate.
        value: the metric (an :class:`~jaxqueue.stats.Estimate`).
        value_class: ``(C,)`` the metric per class.
        derivatives: name -> Estimate of the metric's derivative (``lam`` a scalar, ``scale``
            and ``logits`` ``(C,)``, one per class parameter).
        derivatives_class: name -> Estimate of the per-class metrics' derivatives
            (``(C,)`` for ``lam``, ``(C, C)`` [metric class, parameter class] for the others).
        methods: name -> ``"pathwise"``, ``"measure-valued"`` or ``"crn-difference"``.
        status, reason: the status and why it is not ``ok``.
        replications, n_jobs, warmup: the run's size; start: ``"backward"`` or ``"empty"``.
        level: confidence level.
    """

    metric: str = eqx.field(static=True)
    lam: float = eqx.field(static=True)
    value: Estimate
    value_class: Estimate
    derivatives: dict
    derivatives_class: dict
    methods: dict = eqx.field(static=True)
    status: Status = eqx.field(static=True)
    reason: str = eqx.field(static=True)
    replications: int = eqx.field(static=True)
    n_jobs: int = eqx.field(static=True)
    warmup: int = eqx.field(static=True)
    start: str = eqx.field(static=True)
    level: float = eqx.field(static=True)

    def status_reason(self) -> str:
        return self.reason or "ok"


def _params(workload: Workload, lam, dtype):
    C = workload.n_classes
    return (
        jnp.asarray(lam, dtype),
        jnp.asarray(np.ones(C), dtype),
        jnp.log(jnp.asarray(workload.probs, dtype)),
    )


def _per_rep(kind, q, warm, n_classes):
    """The per-replication metric of waits ``w``, service times ``sigma`` and classes ``cls``
    over the measured jobs: ``(overall, (C,) per class, (R, 4) halves and sums)``: the first
    and second halves' means, the sum and the sum of squares (drift and effective samples)."""

    def f(w, sigma, cls):
        w, sigma, cls = w[warm:], sigma[warm:], cls[warm:]
        x = w + sigma if kind == "response" else w
        mask = cls[None, :] == jnp.arange(n_classes)[:, None]
        half = x.shape[0] // 2
        halves = jnp.stack([x[:half].mean(), x[half:].mean(), x.sum(), (x * x).sum()])
        if kind == "quantile":
            per = jnp.nanquantile(jnp.where(mask, x[None, :], jnp.nan), q, axis=1)
            return jnp.quantile(x, q), per, halves
        cnt = mask.sum(axis=1)
        per = jnp.where(mask, x[None, :], 0).sum(axis=1) / jnp.maximum(cnt, 1)
        return x.mean(), jnp.where(cnt > 0, per, jnp.nan), halves

    return f


def _run(workload, key, n_jobs, params, rep, W0):
    """Waits, service times and classes of the ``n_jobs`` jobs of replication ``rep`` (FCFS)."""
    lam, scale, logits = params
    u = job_uniforms(key, rep, jnp.arange(n_jobs), n_uniforms(workload), lam.dtype)
    inp = jobs_from_uniforms(workload, lam, u, dtype=lam.dtype, probs=jax.nn.softmax(logits))
    sigma = inp.sigma * scale[inp.cls]
    _, w = run_jobs(workload, FCFS(), inp._replace(sigma=sigma), W0)
    return w, sigma, inp.cls


_STATIC = ("kind", "q", "warm", "n_jobs")


@functools.partial(jax.jit, static_argnames=_STATIC)
def _metric(workload, params, key, W0, *, kind, q, warm, n_jobs):
    """Per replication (rows of ``W0``): :func:`_per_rep`'s outputs."""
    f = _per_rep(kind, q, warm, workload.n_classes)

    def one(r, w0):
        return f(*_run(workload, key, n_jobs, params, r, w0))

    return jax.vmap(one)(jnp.arange(W0.shape[0]), W0)


@functools.partial(jax.jit, static_argnames=_STATIC)
def _jacobian(workload, params, key, W0, dW0, *, kind, q, warm, n_jobs):
    """Per replication, forward-mode derivatives of the metric and its per-class values with
    respect to ``(lam, scale_1 .. scale_C)``: ``(R, 1 + C)`` and ``(R, C, 1 + C)``. The start
    ``W0`` moves with the parameters along its derivative ``dW0`` (``(R, s, 1 + C)``)."""
    f = _per_rep(kind, q, warm, workload.n_classes)

    def g(theta, r, w0, dw0):
        p = (theta[0], theta[1:], params[2])
        w0 = w0 + dw0 @ (theta - lax.stop_gradient(theta))
        return f(*_run(workload, key, n_jobs, p, r, w0))[:2]

    theta = jnp.concatenate([params[0][None], params[1]])
    one = lambda r, w0, dw0: jax.jacfwd(g)(theta, r, w0, dw0)  # noqa: E731
    return jax.vmap(one)(jnp.arange(W0.shape[0]), W0, dW0)


def _steps(name, params, h):
    base = params[PARAMS.index(name)]
    step = (h if h is not None else _STEP[name]) * (float(base) if name == "lam" else 1.0)
    n = 1 if name == "lam" else base.shape[0]
    return step, n


def _shift(params, name, j, d):
    i = PARAMS.index(name)
    x = params[i] + d if name == "lam" else params[i].at[j].add(d)
    return tuple(x if k == i else p for k, p in enumerate(params))


def _fcfs(
    workload, lam, wrt, kind, q, key, n_jobs, R, warm, start, dtype, h, differences, coupling
):
    """Per-replication derivatives on the recurrence: name -> ``(overall (R, P), per class
    (R, C, P))``, the per-replication metric and halves, the methods, and the measure-valued
    derivative's cut samples and samples (``None`` without it). ``start``: ``(W0, dW0,
    past)``, the start states, their derivatives with respect to ``(lam, scale)`` and the
    score of their class mix (``(R, C)``; zeros from an empty start or where no central
    difference needs it)."""
    W0, dW0, past = start
    params = _params(workload, lam, dtype)
    sizes = dict(kind=kind, q=q, warm=warm, n_jobs=n_jobs)

    def metric(params, W=W0):
        return _metric(workload, params, key, W, **sizes)

    out, methods = {}, {}
    mean_metric = kind != "quantile" and not differences
    paths = mean_metric and any(n in wrt for n in ("lam", "scale"))
    # the pathwise Jacobian compiles and runs beside the value and the logits' derivative
    with ThreadPoolExecutor(max_workers=1) as pool:
        if paths:
            jac = pool.submit(_jacobian, workload, params, key, W0, dW0, **sizes)
            for name in ("lam", "scale"):  # the pathwise entries first in the results
                if name in wrt:
                    out[name], methods[name] = None, "pathwise"
        y, yc, halves = metric(params)
        cut = None
        if mean_metric and "logits" in wrt:
            ld = logit_derivative(
                workload,
                params,
                key,
                W0,
                yc,
                n_jobs=n_jobs,
                warm=warm,
                samples=coupling.samples,
                horizon=coupling.horizon,
                response=kind == "response",
            )
            out["logits"], methods["logits"] = (ld.overall, ld.per_class), "measure-valued"
            cut = (ld.cut, ld.samples * R)
        if paths:
            dy, dyc = (np.asarray(x) for x in jac.result())  # sliced on the host
            if "lam" in wrt:
                out["lam"] = (dy[:, :1], dyc[:, :, :1])
            if "scale" in wrt:
                out["scale"] = (dy[:, 1:], dyc[:, :, 1:])
    for name in wrt:
        if name in out:
            continue
        step, n = _steps(name, params, h)
        if name == "logits":  # the leave-one-out baseline of the start's score
            base = (jnp.sum(y) - y) / (R - 1)
            basec = (jnp.nansum(yc, axis=0) - yc) / (R - 1)
        cols = []
        for j in range(n):
            if name == "logits":  # the start's class mix enters through its score
                Wu = Wd = W0
                su, sc = (y - base) * past[:, j], (yc - basec) * past[:, None, j]
            else:  # the start moves along its derivative
                col = dW0[:, :, 0 if name == "lam" else 1 + j]
                Wu, Wd = jnp.maximum(W0 + step * col, 0), jnp.maximum(W0 - step * col, 0)
                su, sc = 0.0, 0.0
            up = metric(_shift(params, name, j, step), Wu)
            dn = metric(_shift(params, name, j, -step), Wd)
            cols.append(((up[0] - dn[0]) / (2 * step) + su, (up[1] - dn[1]) / (2 * step) + sc))
        out[name] = (
            jnp.stack([c[0] for c in cols], axis=-1),
            jnp.stack([c[1] for c in cols], axis=-1),
        )
        methods[name] = "crn-difference"
    return out, methods, (y, yc, halves), cut


def _events(workload, lam, pol, wrt, kind, q, key, n_jobs, R, warm, dtype, h):
    """Central differences with common random numbers on the event engine. A quantile is
    each replication's own, from its waiting-time histogram (``quantile_from_hist``); the
    last output is then the per-replication histograms of the base run and their edges (the
    value's interval), else ``None``."""
    if "scale" in wrt:
        raise ValueError(
            f"wrt: scale is supported for FCFS only; under policy {pol.label} use lam, logits"
        )
    C = workload.n_classes
    cut = []  # a run stopped early (buffer full at its cap, event cap): its sums are partial

    def metric(lam_, probs):
        wl = eqx.tree_at(lambda w: w.probs, workload, jnp.asarray(probs))
        sizes = dict(replications=R, warmup=warm, n_jobs=n_jobs)
        a = replication_sums(pol, wl, lam_, key=key, dtype=dtype, **sizes)
        cut.append((a.overflow, a.capped))
        num = a.resp if kind == "response" else a.wait
        sq = (a.resp2 if kind == "response" else a.wait2).sum(1)
        cnt = a.cnt
        halves = np.stack([*a.halves, num.sum(1), sq, cnt.sum(1)], axis=1)
        if kind == "quantile":
            hists = a.wait_hists
            y = np.asarray([quantile_from_hist(x, a.edges, q) for x in hists.sum(1)])
            per = np.asarray([[quantile_from_hist(x, a.edges, q) for x in r] for r in hists])
            return y, per, halves, (hists, a.edges)
        with np.errstate(invalid="ignore", divide="ignore"):
            per = num / cnt
        y = num.sum(1) / np.maximum(cnt.sum(1), 1)
        return y, per, halves, None

    logits = np.log(np.asarray(workload.probs, np.float64))
    y, yc, halves, pooled = metric(lam, np.exp(logits))
    out, methods = {}, {}
    for name in wrt:
        step = (h if h is not None else _STEP[name]) * (lam if name == "lam" else 1.0)
        cols = []
        for j in range(1 if name == "lam" else C):
            if name == "lam":
                up, dn = metric(lam + step, np.exp(logits)), metric(lam - step, np.exp(logits))
            else:
                e = np.eye(C)[j] * step
                pu, pd = (np.exp(logits + e), np.exp(logits - e))
                up, dn = metric(lam, pu / pu.sum()), metric(lam, pd / pd.sum())
            cols.append(((up[0] - dn[0]) / (2 * step), (up[1] - dn[1]) / (2 * step)))
        out[name] = (np.stack([c[0] for c in cols], -1), np.stack([c[1] for c in cols], -1))
        methods[name] = "crn-difference"
    return out, methods, (y, yc, halves), cut, pooled


def _pooled_quantile(hists, edges, q, level):
    """The quantile ``q`` of the replications' pooled histograms ``(R, C, bins)`` with its
    interval (``quantile_ci``), overall and ``(C,)`` per class."""
    value = quantile_ci(hists.sum(1), edges, q, level)
    per = [quantile_ci(hists[:, c], edges, q, level) for c in range(hists.shape[1])]
    stack = lambda f: np.asarray([getattr(e, f) for e in per], np.float64)  # noqa: E731
    return value, Estimate(stack("mean"), stack("low"), stack("high"), value.n, level)


def sensitivity(
    workload: Workload,
    lam: float,
    policy=None,
    *,
    wrt=PARAMS,
    metric: str = "wait_mean",
    key,
    n_jobs: int = 16_000,
    n_replications: int = 64,
    start: Start = Start(),
    differences: Differences = Differences(),
    coupling: Coupling = Coupling(),
    rel_precision: float | None = None,
    level: float = 0.95,
    limit=None,
    override: bool = False,
    dtype=jnp.float64,
    throw: bool = False,
) -> Sensitivity:
    """Derivatives of a stationary metric of the MJQM with intervals (module docstring).

    Args:
        workload: one resource type without specific servers.
        lam: arrival rate (checked against ``lambda_ideal``, a closed form or ``limit``
            unless ``override``).
        policy: ``None`` or FCFS (the recurrence), or any policy (name or object) run by the
            event engine with central differences (``wrt`` lam, logits; a quantile's value is
            that of the pooled histograms with Woodruff's interval, its derivative the mean of
            the replications' own quantiles' differences).
        wrt: a subset of ``("lam", "scale", "logits")``.
        metric: ``wait_mean``, ``response_mean``, ``wait_pNN`` or ``wait_quantile(q)``.
        key: PRNG key (the backward start uses a half, the jobs the other).
        n_jobs: jobs per replication. A derivative remembers a congested period longer than
            the wait does: nearer ``lambda_c`` its interval needs longer replications.
        n_replications: independent replications (a static shape).
        start: a :class:`~jaxqueue.mjqm.options.Start`: backward (FCFS) or empty, and the
            warm-up left out of the statistics.
        differences: a :class:`~jaxqueue.mjqm.options.Differences`: the central-difference
            step, and whether every parameter is differenced (a check of the others).
        coupling: a :class:`~jaxqueue.mjqm.options.Coupling`: the jobs whose class the
            logits' measure-valued derivative changes, and their coupling horizon.
        rel_precision: if given, ``ok`` needs every half-width within this fraction of its
            value.
        level: confidence level. limit: see :func:`~jaxqueue.mjqm.simulate`.
        dtype: float dtype of the recurrence. throw: raise when the status is not ``ok``.

    Returns:
        :class:`Sensitivity`.

    Raises:
        ValueError: a bad argument (one line naming it).
    """
    kind, q = parse_metric(metric)
    wrt = tuple(wrt)
    bad = [w for w in wrt if w not in PARAMS]
    if bad or not wrt or len(set(wrt)) != len(wrt):
        raise ValueError(f"wrt: expected a non-empty subset of lam, scale, logits, got {wrt}")
    if workload.n_types != 1 or workload.specific is not None:
        raise ValueError("workload: one resource type without specific servers is supported")
    if n_replications < 2:
        raise ValueError(f"n_replications: need at least 2, got {n_replications}")
    start = Start.check("sensitivity", "start", start)
    differences = Differences.check("sensitivity", "differences", differences)
    coupling = Coupling.check("sensitivity", "coupling", coupling)
    n_warmup, h, everywhere = start.n_warmup, differences.h, differences.everywhere
    pol = FCFS() if policy is None else parse_policy(policy).bind(workload)
    fcfs = isinstance(pol, FCFS)
    start = start.kind if fcfs else "empty"  # the event engine starts its queues empty
    warm = int(n_warmup) if n_warmup is not None else (0 if start == "backward" else n_jobs // 5)
    if not 0 <= warm <= n_jobs - 4:
        raise ValueError(f"n_warmup: need 0 <= n_warmup <= n_jobs - 4, got {warm}, {n_jobs}")
    lam = check_load(workload, lam, limit=limit, policy=pol, override=override)
    kb, kf = jax.random.split(key)
    R = int(n_replications)
    stationary, start_why, replayed = False, "", True
    if fcfs:
        C = workload.n_classes
        dW0 = np.zeros((R, workload.s, 1 + C), np.dtype(dtype))  # host arrays: no program each
        past = np.zeros((R, C), np.dtype(dtype))
        if start == "backward":
            S = sample_backward(workload, lam, R, key=kb, limit=limit, override=True, dtype=dtype)
            W0 = jnp.asarray(S.W, dtype)
            stationary = S.status == Status.ok
            start_why = "" if stationary else f"the backward start said {S.status}"
            theta = jnp.asarray(np.concatenate([[lam], np.ones(C)]), dtype)
            paths = any(n in wrt for n in ("lam", "scale"))
            # the start's score enters the logits' central differences only
            scores = "logits" in wrt and (kind == "quantile" or everywhere)
            st = start_derivative(workload, S, theta, replay=paths, scores=scores)
            if paths:
                dW0 = jnp.asarray(st.dW0, dtype)
            if scores:
                probs = np.asarray(workload.probs, np.float64)
                past = jnp.asarray(st.counts - st.jobs[:, None] * probs[None, :], dtype)
            replayed = st.mismatch <= _REPLAY_TOL
            if not replayed:
                start_why = (
                    f"the replayed start differs from its backward sample by {st.mismatch:.2g}"
                    " (relative): its derivative is not the sample's"
                )
        else:
            W0 = jnp.zeros((R, workload.s), dtype)
        sizes = (n_jobs, R, warm)
        out, methods, (y, yc, halves), coupled = _fcfs(
            workload, lam, wrt, kind, q, kf, *sizes, (W0, dW0, past), dtype, h, everywhere, coupling
        )
        cut, pooled = [], None
    else:
        out, methods, (y, yc, halves), cut, pooled = _events(
            workload, lam, pol, wrt, kind, q, kf, n_jobs, R, warm, dtype, h
        )
        coupled = None
    # a measure-valued replication is a mean of a few dozen class changes: skewed, so its
    # interval takes mean_ci's skewness and kurtosis corrections
    shape = {n: methods[n] == "measure-valued" for n in out}
    est = {
        n: mean_ci(np.asarray(v[0], np.float64), level=level, shape=shape[n])
        for n, v in out.items()
    }
    est = {n: (_squeeze(e) if n == "lam" else e) for n, e in est.items()}
    est_c = {
        n: mean_ci(np.asarray(v[1], np.float64), level=level, shape=shape[n])
        for n, v in out.items()
    }
    est_c = {n: (_squeeze(e) if n == "lam" else e) for n, e in est_c.items()}
    if pooled is None:
        value = mean_ci(np.asarray(y, np.float64), level=level)
        value_c = mean_ci(np.asarray(yc, np.float64), level=level)
    else:
        value, value_c = _pooled_quantile(*pooled, q, level)
    halves = np.asarray(halves, np.float64)
    _, growing = drift(halves[:, 0], halves[:, 1], float(value.mean))
    counts = halves[:, 4] if halves.shape[1] > 4 else np.full(R, float(n_jobs - warm))
    n_eff = effective_samples(halves[:, 2], halves[:, 3], counts)
    status, why = judge(
        RULES,
        replications=R,
        n_eff=n_eff,
        growing=bool(growing),
        thin=bool(np.isnan(np.asarray(yc)).any()),
        stationary_start=stationary,
    )
    if status == Status.ok and rel_precision is not None:
        wide = [n for n, e in est.items() if np.any(e.half_width > rel_precision * np.abs(e.mean))]
        if wide:
            status = Status.unconverged
            why = f"the intervals of {', '.join(wide)} are wider than rel_precision of the value"
    if any(o for o, _ in cut):
        status, why = Status.overflow, "a run filled its job buffer at its cap: partial sums"
    elif any(c for _, c in cut):
        status, why = Status.unconverged, "a run reached the event cap: partial sums"
    if coupled is not None and coupled[0]:
        status = Status.biased
        why = (
            f"{coupled[0]} of {coupled[1]} class changes of the logits' measure-valued "
            f"derivative had not coupled within {coupling.horizon} jobs: their effect is cut"
        )
    if not replayed:
        status, why = Status.biased, start_why
    elif start_why and status != Status.ok:
        why = f"{why} ({start_why})"
    res = Sensitivity(
        metric=metric,
        lam=float(lam),
        value=value,
        value_class=value_c,
        derivatives=est,
        derivatives_class=est_c,
        methods=methods,
        status=status,
        reason=why,
        replications=R,
        n_jobs=int(n_jobs),
        warmup=warm,
        start=start,
        level=level,
    )
    return res.raise_for_status() if throw else res


def _squeeze(e: Estimate) -> Estimate:
    return Estimate(e.mean[..., 0], e.low[..., 0], e.high[..., 0], e.n, e.level)


def exact_sensitivity(
    workload: Workload, lam: float, metric: str = "wait_mean", *, limit=None
) -> dict:
    """The exact derivatives (``jax.grad`` of the QBD, :func:`~jaxqueue.mjqm.exact`:
    exponential or phase-type laws) of ``wait_mean`` or ``response_mean`` with respect to
    ``lam``, the service scales (at 1) and the class logits (at ``log p``):
    ``{"value", "lam", "scale" (C,), "logits" (C,)}``. ``limit``: as for
    :func:`~jaxqueue.mjqm.simulate`, checked before anything compiles.

    Raises:
        ValueError: a workload the exact solver does not take, or another metric.
        UnstableLoadError: ``lam`` at or beyond ``lambda_ideal``, a closed form or ``limit``.
    """
    kind, _ = parse_metric(metric)
    if kind == "quantile":
        raise ValueError(f"metric: exact derivatives of {metric} are not available")
    lam = check_load(workload, lam, limit=limit)
    wait, data = scaled_wait_mean(workload)
    mean = np.asarray(workload.mean_service(), np.float64)
    logits = np.log(np.asarray(workload.probs, np.float64))
    v, (d_lam, d_scale, d_logits) = _exact_value_and_grad(jax.default_backend())(
        wait, kind == "response", data, np.float64(lam), np.ones_like(mean), logits, mean
    )
    if not math.isfinite(float(v)):
        raise ValueError(
            f"exact: lam = {lam:.6g} is at or beyond the stability limit of this workload"
        )
    return {
        "value": float(v),
        "lam": float(d_lam),
        "scale": np.asarray(d_scale),
        "logits": np.asarray(d_logits),
    }


def _value_and_grad(wait, response, data, lam, scale, logits, mean):
    """The exact mean wait (plus the mean service time ``p . (mean * scale)`` for the
    response) and its gradient in ``(lam, scale, logits)``, ``p = softmax(logits)``."""

    def metric(lam, scale, logits):
        p = jax.nn.softmax(logits)
        v = wait(data, lam, scale, p)
        return v + p @ (mean * scale) if response else v

    return jax.value_and_grad(metric, argnums=(0, 1, 2))(lam, scale, logits)


# one compiled program per structure, the softmax and the metric's sum included (no eager
# operation compiles on its own); it has about a thousand small kernels, which XLA:CPU's
# older emitters compile in half the CPU time of its fusion emitters (and run as fast)
_exact_value_and_grad = jit_per_platform(
    _value_and_grad, {"xla_cpu_use_fusion_emitters": False}, static_argnums=(0, 1)
)
