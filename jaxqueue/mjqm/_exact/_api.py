"""The exact FCFS multiserver-job queue for phase-type services: a level-dependent QBD.

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
probabilities, is in ``docs/concepts/exact.md``. Phase-type laws (Erlang, hyperexponential,
Coxian): the same chain with (class, phase) types in place of classes (:mod:`._ph_levels`).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..._jit import refused
from ..._memory import memory_budget
from ...dist import Exponential
from .._workload import Workload
from ._ph import lambda_c_sparse, ph_key, ph_rates, phase_forms
from ._ph_levels import ph_level_sizes, ph_levels
from ._ph_solve import ph_forms, ph_lambda_c_dense, ph_metrics, ph_numbers
from ._ph_structure import PHKey, ph_counts, ph_structure
from ._result import ExactResult
from ._solve import _functionals, _global_down, _lambda_c, _solve
from ._structure import _shape, _structure, qbd_seconds, qbd_size

__all__ = [
    "ExactResult",
    "check_exact",
    "exact",
    "exact_lambda_c",
    "exact_lambda_c_or_none",
    "exact_size",
    "scaled_wait_mean",
]

# Refuse structures beyond these (the dense repeating block and the global matrices); the
# memory limit is MAX_BYTES or half the machine's memory, whichever is less.
MAX_PHASES = 4000
MAX_BYTES = 6 * 2**30
# The saturated phase-type chain of exact_lambda_c and `mjqm stability`, with its gradient:
# beyond 30,000 phases aggregation-disaggregation (about 1 GB at this size).
MAX_PH_PHASES = 400_000
# stability_limit(method="auto") stops where the direct sparse LU does (seconds, not minutes).
AUTO_PH_PHASES = 8000


def _all_exponential(workload: Workload) -> bool:
    return all(isinstance(law, Exponential) for law in workload.services)


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
    if arrivals:
        _check_poisson(workload)
    _check_size(qbd_size(workload), "QBD")
    return s_c


def _check_poisson(workload: Workload) -> None:
    if not workload.is_poisson:
        raise ValueError(
            f"exact: arrivals are {type(workload.arrival).__name__}, not Poisson; use "
            "`mjqm simulate` or `mjqm sample`"
        )


def _check_size(size: dict, what: str) -> None:
    """Refuse, in one line, a ``what`` (the QBD, the phase-type QBD) beyond the limits on its
    phases per level and its memory, naming both and its time."""
    budget, label = memory_budget(MAX_BYTES)
    n = size["phases"]
    if n > MAX_PHASES or size["bytes"] > budget:
        raise ValueError(
            f"exact: the {what} of this workload has {n:,} phases per level and "
            f"needs about {size['bytes'] / 1e9:.3g} GB and {cpu_time(size['seconds'])} "
            f"(limits: {MAX_PHASES} phases, {label}); "
            f"sparse blocks do not avoid it: the tail matrix R is dense ({n:,}^2, "
            f"{8 * n**2 / 1e9:.3g} GB each; truncated levels instead: docs/concepts/exact.md, "
            "beyond the dense limit); use `mjqm simulate` or `mjqm sample`"
        )


def cpu_time(seconds: float) -> str:
    """``seconds`` of CPU time in one short phrase (hours beside the seconds past one)."""
    hours = f" ({seconds / 3600:.2g} h)" if seconds >= 3600 else ""
    return f"{seconds:.2g} CPU-s{hours}"


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
    phase), one sparse solve on the host with an implicit adjoint (differentiable in the phase
    forms and the class probabilities), up to :data:`MAX_PH_PHASES` phases (beyond 30,000 by
    aggregation-disaggregation onto the class-level phases, the adjoint's Poisson equation by
    the two-level method of the same aggregates).

    Raises:
        ValueError: a law without a phase form, resource vectors or specific servers, or a
            chain beyond the size limits (naming its phases; pile growth estimates it).

    Examples:
        >>> from jaxqueue import scenarios
        >>> round(float(exact_lambda_c(scenarios.get("five-class-exp"))), 3)  # doctest: +SKIP
        1.795
    """
    if not _all_exponential(workload):
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
            f"({vectors:,} service vectors; limit {max_phases:,} phases for this solve): its "
            "lambda_c is estimated by pile growth (`mjqm stability`)"
        )
    st = ph_structure(key)
    out = lambda_c_sparse(st, ph_rates(st, workload))
    why = (
        f"exact: the iterative solve of the saturated chain ({heads:,} phases) did not "
        "converge; its lambda_c is estimated by pile growth (`mjqm stability`)"
    )
    if isinstance(out, jax.core.Tracer):  # under jit or grad: a run-time check
        return eqx.error_if(out, ~jnp.isfinite(out), refused(why))
    if not math.isfinite(float(out)):
        raise ValueError(why)
    return out


def exact_lambda_c_or_none(workload, full: bool = False) -> float | None:
    """:func:`exact_lambda_c` as a float where it applies (one pool of identical servers,
    phase-type services, within the size limits: :data:`AUTO_PH_PHASES` phases for a
    non-exponential law, :data:`MAX_PH_PHASES` if ``full``; any arrival law), else
    ``None``."""
    try:
        if not _all_exponential(workload):
            return float(_ph_lambda_c(workload, MAX_PH_PHASES if full else AUTO_PH_PHASES))
        return float(exact_lambda_c(workload))
    except ValueError:
        return None


def exact(workload: Workload, lam) -> ExactResult:
    """Exact stationary metrics of the FCFS MJQM with Poisson arrivals and phase-type services.

    The level-dependent QBD of the module docstring: the tail by cyclic reduction, the
    boundary levels by linear level reduction, the metrics as linear functionals of the
    stationary law. ``jit``, ``vmap`` over ``lam`` and ``grad`` in ``lam``, the service means
    and the class probabilities work. Classes with probability 0 get ``nan`` class waits.
    Exponential laws take the dense exponential QBD; any other law with a ``phase_form``
    (Erlang, hyperexponential, Coxian) the phase-type QBD over (class, phase) types, whose
    levels are stored (differentiable in ``lam``, the phase forms and the class probabilities).

    Args:
        workload: one pool of ``s`` servers, phase-type service laws, Poisson arrivals.
        lam: arrival rate (scalar; ``vmap`` for a sweep).

    Returns:
        :class:`ExactResult`.

    Raises:
        ValueError: a law without a phase form, non-Poisson arrivals, resource vectors or
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
    if not _all_exponential(workload):
        return _ph_exact(workload, lam)
    s, cores = _check_exponential(workload)
    mu, p = _numbers(workload)
    lam = _checked_lam(lam, p.dtype)
    lam_c = _lambda_c_jit(s, cores, mu, p)
    _refuse_beyond(lam, lam_c, p.dtype)
    res = _exact_jit(s, cores, mu, p, lam)
    return eqx.tree_at(lambda r: r.workload, res, workload, is_leaf=lambda x: x is None)


def _checked_lam(lam, dtype) -> Array:
    """``lam`` as a scalar of ``dtype``; a concrete one must be positive and finite, a traced
    one raises at run time when it is not positive."""
    lam = jnp.asarray(lam, dtype) if not isinstance(lam, jax.Array) else lam.astype(dtype)
    if lam.ndim != 0:
        raise ValueError(f"exact: lam must be a scalar (vmap for a sweep), got shape {lam.shape}")
    if not isinstance(lam, jax.core.Tracer):
        if not (float(lam) > 0 and math.isfinite(float(lam))):
            raise ValueError(f"exact: lam must be positive and finite, got {float(lam)!r}")
        return lam
    return eqx.error_if(lam, ~(lam > 0), refused("exact: lam must be positive (got <= 0 or nan)"))


def _refuse_beyond(lam, lam_c, dtype) -> None:
    """The one-line refusal of a concrete ``lam`` at, beyond or too close to ``lambda_c``."""
    if isinstance(lam, jax.core.Tracer) or isinstance(lam_c, jax.core.Tracer):
        return
    if float(lam) >= float(lam_c):
        raise ValueError(
            f"exact: lam = {float(lam):.6g} is at or beyond the stability limit lambda_c = "
            f"{float(lam_c):.6g} of this workload (the queue grows without bound)"
        )
    if float(lam) >= float(lam_c) * (1.0 - _gap(dtype)):
        raise ValueError(
            f"exact: lam = {float(lam):.10g} is within a relative {_gap(dtype):.1e} of the "
            f"stability limit lambda_c = {float(lam_c):.10g}: too close to solve accurately "
            f"in {dtype}"
        )


def exact_size(workload: Workload) -> dict:
    """Sizes of the QBD :func:`exact` builds for ``workload``, before anything is built:
    ``phases`` (head phases per level), ``service_vectors``, ``levels``, ``bytes`` (peak
    memory in float64) and ``seconds`` (a rough CPU time, :func:`._structure.qbd_seconds`):
    the exponential QBD's for exponential laws or a law without a phase form,
    :func:`ph_exact_size` (with ``slots``, the largest level) for other phase-type laws: the
    figures its refusal names."""
    if _all_exponential(workload):
        return qbd_size(workload)
    try:
        phase_forms(workload.services)
    except ValueError:
        return qbd_size(workload)
    s, cores = _shape(workload)
    return ph_exact_size(ph_key(workload, s, cores))


def ph_exact_size(key: PHKey) -> dict:
    """Sizes of the phase-type QBD of ``key`` before anything is built: ``phases`` (head
    phases), ``service_vectors``, ``levels`` (``N*``), ``slots`` (the largest level),
    ``bytes`` (the dense global matrices, the stored level blocks and their adjoints) and
    ``seconds`` (:func:`._structure.qbd_seconds` at the largest level)."""
    heads, vectors = ph_counts(key)
    sizes = ph_level_sizes(key)
    g, P = heads + vectors + 1, max(sizes)
    return {
        "phases": heads,
        "service_vectors": vectors,
        "levels": len(sizes) - 1,
        "slots": P,
        "bytes": 8 * (4 * g**2 + 3 * len(sizes) * P**2 + 24 * heads**2),
        "seconds": qbd_seconds(len(sizes) - 1, P),
    }


def check_exact(workload: Workload) -> None:
    """The one-line ``ValueError`` of :func:`exact` for a workload it does not take (its laws,
    arrivals, servers or size), without solving."""
    if _all_exponential(workload):
        _check_exponential(workload)
    else:
        _ph_checked_key(workload)


def scaled_wait_mean(workload: Workload):
    """``(f, data)``: ``f(data, lam, scale, p)`` is the exact mean wait of ``workload`` with
    class ``i``'s service time scaled by ``scale[i]`` and class probabilities ``p`` (for
    ``jax.grad``: exponential laws on the QBD, other phase-type laws with their sub-generators
    ``T_i / scale_i``); ``f`` is hashable, a static argument of ``jax.jit`` (one compile per
    structure), ``data`` the workload's numbers. Else exact's one-line refusal for a workload
    it does not take."""
    if _all_exponential(workload):
        s, cores = _check_exponential(workload)
        return _ScaledWait(s, cores), workload.mean_service()
    key = _ph_checked_key(workload)
    return _ScaledPHWait(key), ph_forms(workload)[0]


class _ScaledWait(NamedTuple):
    """The mean wait of the exponential QBD of ``(s, cores)`` from the service means."""

    s: int
    cores: tuple[int, ...]

    def __call__(self, mean, lam, scale, p):
        # two level runs: this program is differentiated, its compile dominates
        return _exact_jit(self.s, self.cores, 1.0 / (mean * scale), p, lam, n_groups=2).wait_mean


class _ScaledPHWait(NamedTuple):
    """The mean wait of the phase-type QBD of ``key`` from the phase forms."""

    key: PHKey

    def __call__(self, forms, lam, scale, p):
        scaled = [(a, T / scale[i]) for i, (a, T) in enumerate(forms)]
        return _ph_exact_jit(self.key, scaled, p, lam).wait_mean


def _ph_checked_key(workload: Workload) -> PHKey:
    """The structure key of a phase-type workload :func:`exact` takes, else its refusal."""
    s, cores = _shape(workload)
    key = ph_key(workload, s, cores)
    _check_poisson(workload)
    _check_size(ph_exact_size(key), "phase-type QBD")
    return key


def _ph_exact(workload: Workload, lam) -> ExactResult:
    """:func:`exact` for phase-type services (:mod:`._ph_solve`)."""
    key = _ph_checked_key(workload)
    forms, p = ph_forms(workload)
    lam = _checked_lam(lam, p.dtype)
    # one compiled call: it solves at a stable stand-in load when lam is not stable
    res = _ph_exact_jit(key, forms, p, lam)
    _refuse_beyond(lam, res.lambda_c, p.dtype)
    return eqx.tree_at(lambda r: r.workload, res, workload, is_leaf=lambda x: x is None)


def _gap(dtype) -> float:
    """Smallest relative distance to ``lambda_c`` solved (closer, the QBD loses its digits:
    measured in float64, the wait stops growing like ``1 / (lambda_c - lam)`` near 1e-8)."""
    return float(100 * np.sqrt(np.finfo(dtype).eps))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _lambda_c_jit(s: int, cores: tuple[int, ...], mu: Array, p: Array) -> Array:
    st = _structure(s, cores)
    return _lambda_c(st, _global_down(st, mu, p))


def _result(
    m: Array, p: Array, busy: Array, lam, lam_safe, lam_c, stable, phases: int, levels: int
):
    """:class:`ExactResult` from the stationary functionals ``m`` (the columns of
    :func:`._solve._functionals`) solved at ``lam_safe`` (``lam`` where stable, else a
    stand-in: the solve's own, so that ``lam``'s cotangent takes one path); ``busy`` the mean
    jobs in service per class, ``lam p_i m_i``, reported when ``lam`` is unstable."""
    K = p.shape[0]
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
        jobs_service_class=jnp.where(stable, m[6 + K :], busy),
        p_wait=jnp.where(stable, m[5], 1.0),
        idle_servers=jnp.where(stable, m[3], 0.0),
        hol_idle_servers=jnp.where(stable, m[4], inf),
        stable=stable,
        phases=phases,
        levels=levels,
    )


@functools.partial(jax.jit, static_argnums=(0,))
def _ph_exact_jit(key: PHKey, forms, p: Array, lam: Array) -> ExactResult:
    """The numbers of :func:`exact` for phase-type services, compiled once per structure."""
    st = ph_levels(key)
    num = ph_numbers(st, forms, p)
    lam_c = ph_lambda_c_dense(st, num)
    stable = lam < lam_c * (1.0 - _gap(p.dtype))
    lam_safe = jnp.where(stable, lam, 0.5 * lam_c)
    m = ph_metrics(st, num, p, lam_safe)
    # mean service alpha (-T)^-1 1 per class
    mean = jnp.stack([a @ jnp.linalg.solve(-T, jnp.ones_like(a)) for a, T in forms])
    return _result(m, p, lam * p * mean, lam, lam_safe, lam_c, stable, st.nh, st.n_star)


@functools.partial(jax.jit, static_argnums=(0, 1), static_argnames=("n_groups",))
def _exact_jit(
    s: int, cores: tuple[int, ...], mu: Array, p: Array, lam: Array, n_groups: int = 8
) -> ExactResult:
    """The numbers of :func:`exact`, compiled once per structure ``(s, cores)`` and dtype
    (the boundary levels in ``n_groups`` runs: ``_solve._level_groups``)."""
    st = _structure(s, cores)
    Dg = _global_down(st, mu, p)
    lam_c = _lambda_c(st, Dg)
    stable = lam < lam_c * (1.0 - _gap(p.dtype))
    lam_safe = jnp.where(stable, lam, 0.5 * lam_c)
    m = _solve(st, Dg, p, *_functionals(st, p), lam_safe, n_groups)
    return _result(m, p, lam * p / mu, lam, lam_safe, lam_c, stable, st.nh, st.n_star)
