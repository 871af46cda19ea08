"""Stability limit of the multiserver-job queue (``mjsre`` Section 5) and the load check.

Theorem 5.1: the FCFS queue is stable iff ``lam < lambda_c = 1 / gamma`` with ``gamma`` the
growth rate ``lim |H_n|_inf / n`` of the pile ``H_{n+1} = R(S(alpha_n, H_n) + sigma_n L(alpha_n))``
(eq. (7): the MJSRE with all inter-arrival times zero). The recurrence engine's
``pile_growth`` (``engines/recurrence/_pile.py``) estimates it by Algorithm 2 into a
:class:`StabilityResult`: ``R`` independent piles, the growth measured after a warm-up, the
horizon grown until the Student-t interval of ``gamma`` is within ``rel_tol``;
``lambda_c = 1 / gamma`` with ``[1 / gamma_hi, 1 / gamma_lo]``.

Closed forms: eq. (8) (:func:`lambda_c_closed_form`, one-or-all workloads) and the bound
``lambda_ideal`` (``Workload.lambda_ideal``, no HOL blocking, Section 7.5).

:func:`check_load` is what every simulation runs before its kernel: the cheap checks
(``lam`` finite and > 0, below ``lambda_ideal`` and a closed form) and, when the caller passes
a ``limit`` (a :class:`StabilityResult` of ``stability_limit`` or a number), that limit. It
never estimates anything itself.
"""

from __future__ import annotations

import math

import numpy as np

from ..dist import Deterministic, Exponential
from ..stats import Result, Status
from ._bspec import workload_fields

__all__ = [
    "StabilityResult",
    "UnstableLoadError",
    "lambda_c_closed_form",
    "check_load",
    "used_limit",
    "unknown_limit",
    "exact_limit",
]


class UnstableLoadError(ValueError):
    """The arrival rate is at or beyond a stability limit (carries the limit and its
    interval)."""

    def __init__(self, msg: str, lambda_c: float, lambda_c_ci: tuple[float, float]):
        super().__init__(msg)
        self.lambda_c = lambda_c
        self.lambda_c_ci = lambda_c_ci


METHODS = {
    "closed-form": "closed form (eq. (8) for fcfs, else the policy's own)",
    "ideal": "lambda_ideal, no server left idle",
    "exact": "exact, the saturated QBD",
    "pile": "pile growth, Algorithm 2",
    "pile-random-assignment": "pile growth of random assignment, Appendix A",
    "saturated": "throughput of the saturated queue",
    "given": "a number passed as limit",
    "unknown": "no method known",
}
"""The methods a :class:`StabilityResult` may carry, with what each is."""


class StabilityResult(Result):
    """The stability limit of a policy on a workload: exact, estimated with its interval, or
    unknown (``method = "unknown"``, ``lambda_c = None``).

    Attributes:
        lambda_c: the limit (``1 / gamma``), ``None`` when unknown. lambda_c_ci: its interval
            ``(lo, hi)`` (``(x, x)`` when exact, ``None`` when unknown).
        gamma, gamma_ci: the pile growth rate (mean pile height added per job) and its interval.
        lambda_ideal: ``s / sum p_i alpha_i E[sigma_i]``. lambda_lower: ``1 / E[sigma]``.
        jobs: jobs per replication measured after the warm-up (0 when exact).
        replications: independent piles or saturated queues (0 when exact).
        rel_half_width: half-width of the ``lambda_c`` interval over ``lambda_c``.
        converged: whether the limit is known to ``rel_tol`` (always for exact ones).
        method: a key of :data:`METHODS`.
        level: confidence level of the intervals.
        policy: the policy's label.
        status: ``ok`` when converged, else ``unconverged`` (an unknown limit too).
    """

    lambda_c: float | None
    lambda_c_ci: tuple[float, float] | None
    gamma: float | None
    gamma_ci: tuple[float, float] | None
    lambda_ideal: float
    lambda_lower: float
    jobs: int
    replications: int
    rel_half_width: float
    converged: bool
    method: str
    level: float = 0.95
    policy: str = "fcfs"

    @property
    def status(self) -> Status:
        return Status.ok if self.converged else Status.unconverged

    def status_reason(self) -> str:
        """Why the status is not ``ok``, in one line."""
        if self.lambda_c is None:
            return f"no method is known for the stability limit of {self.policy} here"
        return (
            f"the relative half-width {self.rel_half_width:.3g} of lambda_c is above rel_tol "
            f"after {self.jobs} jobs per replication; raise max_jobs"
        )

    def describe(self) -> str:
        """The limit and where it comes from, in words (for messages)."""
        if self.lambda_c is None:
            return f"the stability limit of {self.policy} is unknown"
        lo, hi = self.lambda_c_ci
        ci = "" if lo == hi else f" [{lo:.6g}, {hi:.6g}]"
        return f"lambda_c = {self.lambda_c:.6g}{ci} of {self.policy} ({METHODS[self.method]})"

    def summary(self) -> dict:
        """``{"lambda_c", "ci", "method"}``: what a command's JSON says of the limit it used."""
        ci = None if self.lambda_c_ci is None else list(self.lambda_c_ci)
        method = "pile-growth" if self.method == "pile" else self.method
        return {"lambda_c": self.lambda_c, "ci": ci, "method": method}

    def as_dict(self) -> dict:
        return {
            "lambda_c": self.lambda_c,
            "lambda_c_ci": None if self.lambda_c_ci is None else list(self.lambda_c_ci),
            "lambda_ideal": self.lambda_ideal,
            "lambda_lower": self.lambda_lower,
            "gamma": self.gamma,
            "gamma_ci": None if self.gamma_ci is None else list(self.gamma_ci),
            "jobs": self.jobs,
            "replications": self.replications,
            "rel_half_width": self.rel_half_width,
            "converged": self.converged,
            "method": self.method,
        }


def _bounds(workload) -> tuple[float, float]:
    """``lambda_ideal`` and ``1 / E[sigma]`` of a workload."""
    mean = float(np.dot(np.asarray(workload.probs, float), np.asarray(workload.mean_service())))
    return float(workload.lambda_ideal()), 1.0 / mean


def exact_limit(workload, value: float, method: str, policy: str = "fcfs") -> StabilityResult:
    """A limit known exactly (``method``: a key of :data:`METHODS`)."""
    lid, llo = _bounds(workload)
    value = float(value)
    return StabilityResult(
        lambda_c=value,
        lambda_c_ci=(value, value),
        gamma=1.0 / value,
        gamma_ci=(1.0 / value, 1.0 / value),
        lambda_ideal=lid,
        lambda_lower=llo,
        jobs=0,
        replications=0,
        rel_half_width=0.0,
        converged=True,
        method=method,
        policy=policy,
    )


def unknown_limit(workload, policy: str) -> StabilityResult:
    """A limit no method is known for (``method = "unknown"``)."""
    lid, llo = _bounds(workload)
    nothing = dict(lambda_c=None, lambda_c_ci=None, gamma=None, gamma_ci=None)
    return StabilityResult(
        **nothing,
        lambda_ideal=lid,
        lambda_lower=llo,
        jobs=0,
        replications=0,
        rel_half_width=math.inf,
        converged=False,
        method="unknown",
        policy=policy,
    )


def _closed_form(workload, policy) -> float | None:
    """The limit in closed form of ``policy`` on ``workload``: eq. (8) for ``"fcfs"`` (and a
    job-list policy with a recurrence form), a job-list policy's ``closed_form_limit``, none
    for ``"random"`` (random assignment) or ``None``."""
    if policy == "fcfs" or getattr(policy, "recurrence", False):
        return lambda_c_closed_form(workload)
    if hasattr(policy, "closed_form_limit"):
        return policy.closed_form_limit(workload)
    return None


def used_limit(workload, limit, policy="fcfs") -> StabilityResult:
    """The limit a run is checked against: ``limit`` (a result or a number), else the closed
    form of ``policy`` (:func:`check_load`), else unknown."""
    label = getattr(policy, "label", policy or "random assignment")
    if isinstance(limit, StabilityResult):
        return limit
    if limit is not None:
        return exact_limit(workload, limit, "given", label)
    closed = _closed_form(workload, policy)
    return (
        unknown_limit(workload, label)
        if closed is None
        else exact_limit(workload, closed, "closed-form", label)
    )


def _refuse(lam: float, beyond: str, what: str, value: float, ci) -> None:
    raise UnstableLoadError(
        f"lam = {lam:.6g} is {beyond} the stability limit {what}: the queue would grow without "
        "bound; use a smaller lam, or override=True for a transient run",
        value,
        tuple(ci),
    )


def check_load(workload, lam, *, limit=None, policy="fcfs", override: bool = False) -> float:
    """Validate an arrival rate before a simulation (Python, before tracing); no estimate is
    run here.

    Args:
        workload: the model.
        lam: the arrival rate (a concrete number).
        limit: a :class:`StabilityResult` (``lam`` refused unless below the lower end of its
            interval; an unknown one checks nothing), a number, or ``None`` (the cheap checks
            only).
        policy: whose closed form applies: ``"fcfs"``, a job-list policy, or ``None`` (random
            assignment: ``lambda_ideal`` alone).
        override: skip the stability checks (``lam`` must still be finite and > 0).

    Returns:
        ``lam`` as a float.

    Raises:
        ValueError: ``lam`` not a finite positive number.
        UnstableLoadError: ``lam`` at or beyond ``lambda_ideal``, a closed form or ``limit``
            (the message names the limit and where it comes from).
    """
    try:
        lam_f = float(lam)
    except (TypeError, ValueError):
        raise ValueError(f"lam must be a number, got {lam!r}") from None
    if not math.isfinite(lam_f) or lam_f <= 0:
        raise ValueError(f"lam (arrival rate) must be finite and > 0, got {lam!r}")
    if override:
        return lam_f
    label = getattr(policy, "label", policy or "random assignment")
    name = f" {workload.name!r}" if getattr(workload, "name", "") else ""
    lid = float(workload.lambda_ideal())
    if lam_f >= lid:
        what = f"lambda_ideal = {lid:.6g} of workload{name} (no policy is stable beyond it)"
        _refuse(lam_f, "at or beyond", what, lid, (lid, lid))
    closed = _closed_form(workload, policy)
    if closed is not None and lam_f >= closed:
        eq = ", eq. (8)" if policy == "fcfs" or getattr(policy, "recurrence", False) else ""
        what = f"lambda_c = {closed:.6g} of {label} on workload{name} (closed form{eq})"
        _refuse(lam_f, "at or beyond", what, closed, (closed, closed))
    if isinstance(limit, (int, float, np.integer, np.floating)):
        if not limit > 0:
            raise ValueError(f"limit must be > 0 (a stability limit), got {limit!r}")
        limit = exact_limit(workload, limit, "given", label)
    if limit is not None and limit.lambda_c is not None and lam_f >= limit.lambda_c_ci[0]:
        lo, hi = limit.lambda_c_ci
        beyond = "at or beyond" if lo == hi else f"not below the lower end {lo:.6g} of"
        _refuse(lam_f, beyond, f"{limit.describe()}, passed as limit", limit.lambda_c, (lo, hi))
    return lam_f


def _moments(workload):
    s, cores, probs, laws, _ = workload_fields(workload)
    means = np.array([float(law.mean()) for law in laws])
    return s, cores, probs, laws, means


def lambda_c_closed_form(workload) -> float | None:
    """``lambda_c = 1 / gamma`` from eq. (8) when it has a closed form, else ``None``.

    Applies to one resource type, no specific servers, every class asking for ``1`` or ``s``
    servers, with at least one global class and the one-server classes sharing one exponential
    or one deterministic law. A cycle is a global job followed by ``K ~ Geometric(p_g)``
    one-server jobs (``P(K = k) = (1 - p_g)^k p_g``); the next global job waits for the pile
    ``M_K`` of those ``K`` jobs started together on ``s`` servers, so
    ``gamma = p_g (E[sigma_g] + E[M_K])`` with (``q = 1 - p_g``, small mean ``m``)

    * exponential: ``E[M_K] = m (q^(s+1) / (p_g s) + sum_{j=1}^{s} q^j / j)``
      (``(K - s)^+`` departures at rate ``s / m``, then the maximum of ``min(K, s)``
      exponentials);
    * deterministic: ``E[M_K] = m E[ceil(K / s)] = m q / (1 - q^s)``.

    Returns:
        The limit as a float, or ``None`` when the case does not apply.
    """
    if workload.n_types != 1 or workload.specific is not None:
        return None
    s = workload.servers[0]
    cores = np.asarray(workload.cores)[:, 0]
    probs = np.asarray(workload.probs, dtype=float)
    means = np.asarray(workload.mean_service(), dtype=float)
    glob = cores == s
    if not glob.any() or not np.all(glob | (cores == 1)):
        return None
    pg = float(probs[glob].sum())
    eg = float((probs[glob] * means[glob]).sum() / pg)
    small = [law for law, g in zip(workload.services, glob, strict=True) if not g]
    if pg >= 1.0 - 1e-15 or not small:
        return 1.0 / eg
    q = 1.0 - pg
    types = {type(law) for law in small}
    m_small = {float(law.mean()) for law in small}
    if len(types) != 1 or len(m_small) != 1:
        return None
    m = m_small.pop()
    if types == {Exponential}:
        j = np.arange(1, s + 1)
        e_mk = m * (q ** (s + 1) / (pg * s) + float(np.sum(q**j / j)))
    elif types == {Deterministic}:
        e_mk = m * q / (1.0 - q**s)
    else:
        return None
    return 1.0 / (pg * (eg + e_mk))
