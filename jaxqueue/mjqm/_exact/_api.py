"""The exact FCFS multiserver-job queue for exponential services: a level-dependent QBD.

Poisson arrivals of rate ``lam``, class ``i`` with probability ``p_i`` holding ``a_i`` of ``s``
servers for an exponential time of mean ``m_i``, strict FCFS with head-of-line blocking
(``mjsre`` Section 2, the model of its Table 1; here any number of classes).

The chain: level ``N`` = jobs in the system; phase ``(n, h)``, ``n`` the jobs in service per
class and ``h`` the class of the blocked head (or *none*). The classes behind the head are
revealed only when they reach it, so a departure starts a *cascade* whose outcomes are
transitions between global phases: every block is a sub-block of two global matrices (down
``D``, up ``U``) cut by the valid phases of a level. From ``N* = max |n| + 1`` on the chain is
level-independent and its tail matrix-geometric (``R`` from ``G`` by cyclic reduction, Bini
and Meini 1996); the boundary levels are reduced from the top and the metrics accumulated as
linear functionals in the same pass (no level stored). The stability limit is the saturated
departure rate ``lambda_c = phi . d`` (``phi`` stationary for ``D_HH - diag(d)``).

Differentiable in ``lam``, the service means and the class probabilities: ``R`` has a custom
adjoint (the implicit function theorem on ``A0 + R A1 + R^2 A2 = 0``, a Stein equation summed
by doubling), the rest is a fixed-length scan. The derivation, with the cascade
probabilities, is in ``docs/concepts/exact.md``.
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..._jit import refused
from ..._memory import memory_budget
from ...dist import Exponential
from .._workload import Workload
from ._ph import lambda_c_sparse, ph_key, ph_rates
from ._ph_structure import ph_counts, ph_structure
from ._result import ExactResult
from ._solve import _functionals, _global_down, _lambda_c, _solve
from ._structure import _shape, _structure, exact_size

__all__ = ["ExactResult", "exact", "exact_lambda_c", "exact_lambda_c_or_none", "exact_size"]

# Refuse structures beyond these (the dense repeating block and the global matrices); the
# memory limit is MAX_BYTES or half the machine's memory, whichever is less.
MAX_PHASES = 4000
MAX_BYTES = 6 * 2**30
# The saturated phase-type chain of exact_lambda_c: one sparse LU (its fill grows fast with the
# cascades' reach, so the limit is on the phases).
MAX_PH_PHASES = 30000
# stability_limit(method="auto") stops where the direct sparse LU does (seconds, not minutes).
AUTO_PH_PHASES = 8000


def _check_exponential(workload: Workload, arrivals: bool = True) -> tuple[int, tuple[int, ...]]:
    """``(s, cores)`` of a workload the QBD solves, else a one-line ``ValueError``. The stability
    limit does not depend on the arrival law (``mjsre`` Remark 4): ``arrivals=False`` skips
    the Poisson check."""
    s_c = _shape(workload)
    for i, law in enumerate(workload.services):
        if not isinstance(law, Exponential):
            raise ValueError(
                f"exact: class {i} has service law {type(law).__name__}; the exact solver needs "
                "exponential services (use `mjqm simulate` or `mjqm sample`)"
            )
    if arrivals and not workload.is_poisson:
        raise ValueError(
            f"exact: arrivals are {type(workload.arrival).__name__}, not Poisson; use "
            "`mjqm simulate` or `mjqm sample`"
        )
    size = exact_size(workload)
    budget, label = memory_budget(MAX_BYTES)
    if size["phases"] > MAX_PHASES or size["bytes"] > budget:
        raise ValueError(
            f"exact: the QBD of this workload has {size['phases']:,} phases per level and needs "
            f"about {size['bytes'] / 1e9:.3g} GB (limits: {MAX_PHASES} phases, {label}); use "
            "`mjqm simulate` or `mjqm sample`"
        )
    return s_c


def _numbers(workload: Workload, dtype=None):
    mean = workload.mean_service()
    p = jnp.asarray(workload.probs)
    dt = dtype or jnp.result_type(mean, p, float)
    return 1.0 / mean.astype(dt), p.astype(dt)


def exact_lambda_c(workload: Workload) -> Float[Array, ""]:
    """The exact stability limit ``lambda_c`` of an FCFS MJQM with phase-type services.

    ``lambda_c = phi . d`` where ``phi`` is the stationary law of the saturated phase process
    (generator ``D_HH - diag(d)``, the queue never empties) and ``d`` the departure rate of a
    phase: the long-run departure rate of the saturated queue (``mjsre`` Theorem 5.1
    gives the same limit as ``1 / gamma``; eq. (8) in closed form for one-or-all workloads).
    Differentiable in the service means and class probabilities. Exponential services: the
    dense QBD's saturated block; other phase-type laws (Erlang, hyperexponential, Coxian, any
    law with a ``phase_form``): the saturated chain over the jobs in service per (class,
    phase), one sparse LU on the host with an implicit adjoint (differentiable in the phase
    forms and the class probabilities), up to :data:`MAX_PH_PHASES` phases.

    Raises:
        ValueError: a law without a phase form, resource vectors or specific servers, or a
            chain beyond the size limits (naming its phases; pile growth estimates it).

    Examples:
        >>> from jaxqueue import scenarios
        >>> round(float(exact_lambda_c(scenarios.get("five-class-exp"))), 3)  # doctest: +SKIP
        1.795
    """
    if not all(isinstance(law, Exponential) for law in workload.services):
        return _ph_lambda_c(workload)
    s, cores = _check_exponential(workload, arrivals=False)
    mu, p = _numbers(workload)
    return _lambda_c_jit(s, cores, mu, p)


def _ph_lambda_c(workload: Workload, max_phases: int = MAX_PH_PHASES) -> Array:
    s, cores = _shape(workload)
    key = ph_key(workload, s, cores)
    heads, vectors = ph_counts(key)
    if heads > max_phases:
        raise ValueError(
            f"exact: the saturated phase-type chain of this workload has {heads:,} phases "
            f"({vectors:,} service vectors; limit {max_phases:,} phases for the sparse "
            "solve): its lambda_c is estimated by pile growth (`mjqm stability`)"
        )
    st = ph_structure(key)
    out = lambda_c_sparse(st, ph_rates(st, workload))
    if not isinstance(out, jax.core.Tracer) and not math.isfinite(float(out)):
        raise ValueError(
            f"exact: the iterative solve of the saturated chain ({heads:,} phases) did not "
            "converge; its lambda_c is estimated by pile growth (`mjqm stability`)"
        )
    return out


def exact_lambda_c_or_none(workload, full: bool = False) -> float | None:
    """:func:`exact_lambda_c` as a float where it applies (one pool of identical servers,
    phase-type services, within the size limits: :data:`AUTO_PH_PHASES` phases for a
    non-exponential law unless ``full``; any arrival law), else ``None``."""
    try:
        if not full and not all(isinstance(x, Exponential) for x in workload.services):
            return float(_ph_lambda_c(workload, AUTO_PH_PHASES))
        return float(exact_lambda_c(workload))
    except ValueError:
        return None


def exact(workload: Workload, lam) -> ExactResult:
    """Exact stationary metrics of the FCFS MJQM with Poisson arrivals and exponential services.

    The level-dependent QBD of the module docstring: the tail by cyclic reduction, the
    boundary levels by linear level reduction, the metrics as linear functionals of the
    stationary law. ``jit``, ``vmap`` over ``lam`` and ``grad`` in ``lam``, the service means
    and the class probabilities work. Classes with probability 0 get ``nan`` class waits.

    Args:
        workload: one pool of ``s`` servers, exponential service laws, Poisson arrivals.
        lam: arrival rate (scalar; ``vmap`` for a sweep).

    Returns:
        :class:`ExactResult`.

    Raises:
        ValueError: a non-exponential service law, non-Poisson arrivals, resource vectors or
            specific servers, a phase count beyond :data:`MAX_PHASES` (with the memory it
            would need), ``lam <= 0`` or ``lam >= lambda_c`` (with ``lambda_c``) for a
            concrete ``lam``. A traced ``lam`` at or beyond ``lambda_c`` gives ``stable =
            False`` and infinite waits instead (a sweep may cross the limit; an optimiser
            sees ``inf``); a traced ``lam <= 0`` or ``nan`` raises at run time
            (``eqx.error_if``).

    Examples:
        >>> import jax; jax.config.update("jax_enable_x64", True)
        >>> from jaxqueue import scenarios
        >>> res = exact(scenarios.get("five-class-exp"), 1.0)
        >>> str(res.status), res.phases
        ('ok', 842)
    """
    s, cores = _check_exponential(workload)
    mu, p = _numbers(workload)
    lam = jnp.asarray(lam, p.dtype) if not isinstance(lam, jax.Array) else lam.astype(p.dtype)
    if lam.ndim != 0:
        raise ValueError(f"exact: lam must be a scalar (vmap for a sweep), got shape {lam.shape}")
    if not isinstance(lam, jax.core.Tracer):
        if not (float(lam) > 0 and math.isfinite(float(lam))):
            raise ValueError(f"exact: lam must be positive and finite, got {float(lam)!r}")
    else:
        lam = eqx.error_if(
            lam, ~(lam > 0), refused("exact: lam must be positive (got <= 0 or nan)")
        )
    lam_c = _lambda_c_jit(s, cores, mu, p)
    if not isinstance(lam, jax.core.Tracer) and not isinstance(lam_c, jax.core.Tracer):
        if float(lam) >= float(lam_c):
            raise ValueError(
                f"exact: lam = {float(lam):.6g} is at or beyond the stability limit lambda_c = "
                f"{float(lam_c):.6g} of this workload (the queue grows without bound)"
            )
        if float(lam) >= float(lam_c) * (1.0 - _gap(p.dtype)):
            raise ValueError(
                f"exact: lam = {float(lam):.10g} is within a relative {_gap(p.dtype):.1e} of the "
                f"stability limit lambda_c = {float(lam_c):.10g}: too close to solve accurately "
                f"in {p.dtype}"
            )
    res = _exact_jit(s, cores, mu, p, lam)
    return eqx.tree_at(lambda r: r.workload, res, workload, is_leaf=lambda x: x is None)


def _gap(dtype) -> float:
    """Smallest relative distance to ``lambda_c`` solved (closer, the QBD loses its digits:
    measured in float64, the wait stops growing like ``1 / (lambda_c - lam)`` near 1e-8)."""
    return float(100 * np.sqrt(np.finfo(dtype).eps))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _lambda_c_jit(s: int, cores: tuple[int, ...], mu: Array, p: Array) -> Array:
    st = _structure(s, cores)
    return _lambda_c(st, _global_down(st, mu, p))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _exact_jit(s: int, cores: tuple[int, ...], mu: Array, p: Array, lam: Array) -> ExactResult:
    """The numbers of :func:`exact`, compiled once per structure ``(s, cores)`` and dtype."""
    st = _structure(s, cores)
    Dg = _global_down(st, mu, p)
    lam_c = _lambda_c(st, Dg)
    stable = lam < lam_c * (1.0 - _gap(p.dtype))
    lam_safe = jnp.where(stable, lam, 0.5 * lam_c)
    m = _solve(st, Dg, p, *_functionals(st, p), lam_safe)
    K = len(cores)
    inf = jnp.asarray(jnp.inf, p.dtype)

    def cap(x):
        return jnp.where(stable, x, inf)

    waiting = m[6 : 6 + K] + p * m[1]
    return ExactResult(
        lam=lam,
        lambda_c=lam_c,
        wait_mean=cap(waiting.sum() / lam_safe),
        wait_mean_class=cap(waiting / (lam_safe * p)),
        jobs_mean=cap(m[2] + m[1] + m[6 + K :].sum()),
        jobs_waiting_mean=cap(waiting.sum()),
        jobs_waiting_class=cap(waiting),
        jobs_service_class=jnp.where(stable, m[6 + K :], lam * p / mu),
        p_wait=jnp.where(stable, m[5], 1.0),
        idle_servers=jnp.where(stable, m[3], 0.0),
        hol_idle_servers=jnp.where(stable, m[4], inf),
        stable=stable,
        phases=st.nh,
        levels=st.n_star,
    )
