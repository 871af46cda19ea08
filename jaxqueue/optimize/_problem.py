"""Problem description for the dimensioning layer: targets, parameter transforms, results."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..stats import Result, Status

__all__ = [
    "Box",
    "Fixed",
    "OptimizeResult",
    "Positive",
    "Problem",
    "Simplex",
    "Target",
]


@dataclasses.dataclass(frozen=True)
class Target:
    """One performance target ``metrics[metric][index] <= bound`` (or ``>=``).

    Typical metrics: ``"T"`` (mean response time, upper), ``"W"`` (mean waiting time, upper),
    ``"W_p90"`` (90th percentile of waiting, upper), ``"gamma"`` (mean service rate, lower),
    or any ratio a problem's metric function exposes.

    Args:
        metric: key of the metrics dict.
        bound: the target value (> 0: constraints are handled on the log scale,
            ``g = log(value / bound)``).
        index: element of the metric array (``None`` for a scalar metric).
        sense: ``"upper"`` (value <= bound) or ``"lower"`` (value >= bound).

    Raises:
        ValueError: non-positive bound or unknown sense.
    """

    metric: str
    bound: float
    index: int | None = None
    sense: str = "upper"

    def __post_init__(self):
        if self.sense not in ("upper", "lower"):
            raise ValueError(f"sense: expected 'upper' or 'lower', got {self.sense!r}")
        if not float(self.bound) > 0:
            raise ValueError(f"bound: targets must be positive, got {self.bound}")

    @property
    def label(self) -> str:
        op = "<=" if self.sense == "upper" else ">="
        idx = "" if self.index is None else f"[{self.index}]"
        return f"{self.metric}{idx} {op} {self.bound:g}"

    def value(self, metrics: Mapping[str, Any]):
        v = metrics[self.metric]
        return v if self.index is None else v[self.index]

    def violation(self, metrics: Mapping[str, Any]):
        """``g <= 0`` iff met: ``log(value/bound)`` (upper) or ``log(bound/value)`` (lower)."""
        v = self.value(metrics)
        # values <= 0 are floored at 1e-12 * bound (met for an upper target, violated for a
        # lower one) so that the log stays finite; NaN never meets a target
        floor = 1e-12 * self.bound
        g = jnp.log(jnp.maximum(v, floor)) - jnp.log(self.bound)
        g = g if self.sense == "upper" else -g
        return jnp.where(jnp.isnan(v), jnp.inf, g)

    def slack(self, metrics: Mapping[str, Any]) -> float:
        """``bound - value`` (upper) or ``value - bound`` (lower): >= 0 iff met."""
        v = float(np.asarray(self.value(metrics)))
        return self.bound - v if self.sense == "upper" else v - self.bound


class Positive:
    """Positivity by log-parameterisation: ``x = exp(z)``."""

    def forward(self, z):
        return jnp.exp(z)

    def inverse(self, x):
        return jnp.log(jnp.asarray(x))


@dataclasses.dataclass(frozen=True)
class Box:
    """Bounds ``lower < x < upper`` by ``x = lower + (upper - lower) sigmoid(z)``.

    With ``log=True`` the box is taken on ``log x`` (both bounds must be positive).
    """

    lower: float
    upper: float
    log: bool = False

    def __post_init__(self):
        if not self.lower < self.upper:
            raise ValueError(f"Box: need lower < upper, got {self.lower}, {self.upper}")
        if self.log and not self.lower > 0:
            raise ValueError("Box: log=True needs a positive lower bound")

    def _ends(self):
        if self.log:
            return np.log(self.lower), np.log(self.upper)
        return self.lower, self.upper

    def forward(self, z):
        lo, hi = self._ends()
        y = lo + (hi - lo) * jax.nn.sigmoid(z)
        return jnp.exp(y) if self.log else y

    def inverse(self, x):
        lo, hi = self._ends()
        y = jnp.log(jnp.asarray(x)) if self.log else jnp.asarray(x)
        t = jnp.clip((y - lo) / (hi - lo), 1e-9, 1 - 1e-9)
        return jnp.log(t) - jnp.log1p(-t)


class Simplex:
    """Probability vectors (rows on the last axis) by softmax: ``x = softmax(z)``."""

    def forward(self, z):
        return jax.nn.softmax(z, axis=-1)

    def inverse(self, x):
        x = jnp.asarray(x)
        return jnp.log(jnp.clip(x, 1e-12, None))


class Fixed:
    """A parameter held at its initial value (not optimised)."""

    def forward(self, z):
        return jax.lax.stop_gradient(z)

    def inverse(self, x):
        return jnp.asarray(x)


@dataclasses.dataclass(frozen=True)
class Problem:
    """A parameterised model to dimension: minimise ``cost(params)`` under ``targets``.

    Args:
        params0: initial parameters (a dict name -> array), in natural units.
        transforms: per parameter a transform (:class:`Positive`, :class:`Box`,
            :class:`Simplex`, :class:`Fixed`) mapping an unconstrained variable to it.
        cost: ``params -> scalar`` to minimise (use ``-lam`` to maximise a rate).
        metrics: ``params -> dict`` of differentiable metrics; must hold ``"margin"``
            (> 0 iff stable) used by the log-barrier and the final stability check.
        targets: the constraints.
        evaluate: ``params -> dict`` re-evaluation at the solution (the exact engine, or an
            independent simulation); defaults to ``metrics``.
        polish: ``(params, s) -> params``, a one-parameter family through ``params`` (s = 1)
            that becomes monotonically safer as ``s`` grows (scale capacities by ``s``, divide
            the arrival rate by ``s``...). The final feasibility polish bisects on ``s``.
        candidates: ``params -> list[params]`` integer roundings of a relaxed solution; each is
            re-evaluated and the cheapest one that meets every target is returned.
        names: optional labels of the parameters in reports.
    """

    params0: Mapping[str, Any]
    transforms: Mapping[str, Any]
    cost: Callable
    metrics: Callable
    targets: Sequence[Target] = ()
    evaluate: Callable | None = None
    polish: Callable | None = None
    candidates: Callable | None = None

    def __post_init__(self):
        missing = set(self.params0) - set(self.transforms)
        if missing:
            raise ValueError(f"transforms: no transform for parameters {sorted(missing)}")

    def to_params(self, z):
        return {k: self.transforms[k].forward(v) for k, v in z.items()}

    def to_z(self, params):
        return {k: self.transforms[k].inverse(jnp.asarray(v)) for k, v in params.items()}


def target_status(met: bool, stable: bool) -> Status:
    """``ok`` when every target is met, else ``unstable`` (the model is unstable at the
    answer) or ``infeasible`` (stable, some target missed)."""
    return Status.ok if met else (Status.infeasible if stable else Status.unstable)


class OptimizeResult(Result):
    """Outcome of :func:`jaxqueue.optimize.minimize` (immutable).

    Attributes:
        params: optimised parameters (numpy), after polish / rounding.
        cost: cost at ``params``.
        metrics: metrics re-evaluated at ``params`` by ``problem.evaluate``.
        slack: per target ``bound - value`` (upper) or ``value - bound`` (lower), >= 0 iff met.
        targets_met: every target met and the model stable on re-evaluation.
        stable: ``margin > 0`` on re-evaluation.
        history: per iteration ``cost``, ``violation`` (max log-violation), ``loss`` (numpy).
        relaxed_params: the continuous optimum before polish / rounding.
        polish_factor: the ``s`` chosen by the polish (1.0 without polish).
        status: a :class:`~jaxqueue.stats.Status`: ``ok``, ``infeasible`` or ``unstable``
            (:func:`target_status`).
    """

    params: dict
    cost: float
    metrics: dict
    slack: list
    targets_met: bool
    stable: bool
    history: dict
    relaxed_params: dict
    polish_factor: float
    status: Status
    targets: list = eqx.field(default_factory=list)

    def status_reason(self) -> str:
        """Why the status is not ``ok``, in one line."""
        if self.status == Status.unstable:
            return "the model is unstable at the returned parameters"
        missed = [t for t, s in zip(self.targets, self.slack, strict=False) if s < 0]
        return f"targets missed at the returned parameters: {', '.join(map(str, missed))}"


def newton_rate_step(lam, value, slope, aim, lo, hi, *, usable=True, damp=1.0):
    """The next rate of a safeguarded Newton search for ``value(lam) = aim`` (a wait growing
    with ``lam``): a Newton step on ``phi = lam / value - lam / aim`` (linear in ``lam`` for
    the M/M/1 shape ``a lam / (b - lam)``), divided by ``damp``, where it is ``usable``,
    descends and lands inside the bracket ``(lo, hi)``; else bisection. Returns
    ``(lam, "newton" | "bisect")``."""
    new = math.nan
    if usable:
        dphi = 1.0 / value - lam * slope / value**2 - 1.0 / aim
        if dphi < 0:
            new = lam - (lam / value - lam / aim) / dphi / damp
    if math.isfinite(new) and lo < new < hi:
        return new, "newton"
    return 0.5 * (lo + hi), "bisect"


def max_rate_result(
    lam, metrics, targets, stable, lams, values, bound, *, name="lam", of_rate=None
) -> OptimizeResult:
    """The :class:`OptimizeResult` of a largest-arrival-rate search (no polish): the answer
    ``lam``, its re-evaluated ``metrics`` against ``targets``, and the iterates ``lams`` with
    their values of the binding metric against ``bound`` as the history. The parameter is
    ``name`` (default the rate itself, cost ``-lam``); ``of_rate`` maps a rate to that
    parameter, whose value is then the cost (a server speed that the rate stands for)."""
    slack = [t.slack(metrics) for t in targets]
    met = bool(stable and min(slack) >= 0)
    lams = np.asarray(lams)
    x, cost = (lam, -lams) if of_rate is None else (of_rate(lam), of_rate(lams))
    return OptimizeResult(
        params={name: np.asarray(x)},
        cost=-lam if of_rate is None else float(x),
        metrics=metrics,
        slack=slack,
        targets_met=met,
        stable=bool(stable),
        history={
            "cost": cost,
            "violation": np.log(np.asarray(values) / bound),
            "loss": cost,
        },
        relaxed_params={name: np.asarray(x)},
        polish_factor=1.0,
        status=target_status(met, bool(stable)),
        targets=[t.label for t in targets],
    )


def interval_max_rate(at, target, *, lam0, hi0, rtol, max_iter, progress=None) -> dict:
    """Largest ``lam`` whose simulated value meets ``target``, by a safeguarded Newton
    iteration on simulated values and derivatives with intervals.

    ``at(lam)`` gives the value ``V`` with its interval ``[V_lo, V_hi]`` and ``dV/dlam`` with
    ``[D_lo, D_hi]`` (a dict: ``value``, ``value_ci``, ``derivative``, ``derivative_ci``,
    ``usable``, False for a run that is not stationary, and any keys to keep in the history).
    Stopping rule: ``target (1 - rtol) <= V_hi <= target`` (the rate meets the target with
    confidence and is within ``rtol`` of it). Bracket: ``lo``, the largest rate with ``V_hi <=
    target``; ``hi``, the smallest with ``V_lo > target`` or an unusable run. Step: Newton on
    ``phi = lam / V - lam / aim`` (:func:`newton_rate_step`; ``aim = target (1 - rtol / 2) /
    (1 + h)`` with ``h`` the value's relative half-width, so the next ``V_hi`` lands in the
    window), divided by ``1 + r`` with ``r`` the derivative's relative half-width (the
    interval sets the step: a noisy slope moves less); a step out of ``(lo, hi)`` or without a
    positive slope bisects instead.

    Returns:
        dict with ``lam`` (the best rate meeting the target with confidence), ``value``,
        ``value_ci``, ``derivative``, ``derivative_ci``, ``converged``, ``iterations`` and
        ``history`` per rate (``lam``, the keys of ``at`` but ``usable``, ``step``).

    Raises:
        RuntimeError: no rate met the target.
    """
    lo, hi, lam = 0.0, float(hi0), float(lam0)
    hist, best, converged, step = {"lam": []}, None, False, "start"
    for it in range(int(max_iter)):
        row = dict(at(lam))
        V, (V_lo, V_hi) = row["value"], row["value_ci"]
        D, (D_lo, D_hi) = row["derivative"], row["derivative_ci"]
        usable = row.pop("usable") and math.isfinite(V_hi)
        for k, x in {"lam": lam, **row, "step": step}.items():
            hist.setdefault(k, []).append(x)
        if progress is not None:
            viol = math.log(V / target) if V > 0 and math.isfinite(V) else math.inf
            progress(it, {"round": it + 1, "rounds": max_iter, "cost": -lam, "violation": viol})
        if usable and V_hi <= target:
            lo = max(lo, lam)
            best = (lam, V, [V_lo, V_hi], D, [D_lo, D_hi])
            if V_hi >= target * (1.0 - rtol):
                converged = True
                break
        elif not usable or V_lo > target:
            hi = min(hi, lam)
        usable = usable and V > 0 and D > 0
        aim = target * (1.0 - 0.5 * rtol) / (1.0 + (V_hi - V) / V) if usable else target
        damp = 1.0 + 0.5 * (D_hi - D_lo) / D if usable else 1.0  # a noisy slope: shorter step
        lam, step = newton_rate_step(lam, V, D, aim, lo, hi, usable=usable, damp=damp)
        if hi - lo <= 0.25 * rtol * max(lo, 1e-300):
            break
    if best is None:
        raise RuntimeError("interval_max_rate: no rate meeting the target was found")
    lam, V, V_ci, D, D_ci = best
    return {
        "lam": lam,
        "value": V,
        "value_ci": V_ci,
        "derivative": D,
        "derivative_ci": D_ci,
        "converged": converged,
        "iterations": len(hist["lam"]),
        "history": hist,
    }
