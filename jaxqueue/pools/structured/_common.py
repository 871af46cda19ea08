"""Shared helpers of the structured balanced-fairness solvers (result assembly, stability)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._result import BFResult


def is_concrete(*xs) -> bool:
    """True when none of ``xs`` is a tracer (values are known now, outside jit / vmap / grad)."""
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(xs))


def float_dtype(*xs):
    """The floating dtype of the inputs (default float when they are Python numbers / ints)."""
    dt = jnp.result_type(*[jnp.asarray(x) for x in xs])
    if not jnp.issubdtype(dt, jnp.floating):
        dt = jnp.result_type(float)
    return dt


def as_float(x, dtype) -> jax.Array:
    """``jnp.asarray(x, dtype)``."""
    return jnp.asarray(x, dtype=dtype)


def masked_logsumexp(x: jax.Array, mask: jax.Array, axis: int = -1) -> jax.Array:
    """``log sum_{mask} exp(x)`` along ``axis``, ``-inf`` when the mask is empty (grad-safe)."""
    x = jnp.where(mask, x, -jnp.inf)
    m = jnp.max(x, axis=axis, keepdims=True)
    m_safe = jnp.where(jnp.isfinite(m), m, 0.0)
    s = jnp.sum(jnp.where(mask, jnp.exp(x - m_safe), 0.0), axis=axis, keepdims=True)
    s_pos = s > 0
    out = jnp.where(s_pos, jnp.log(jnp.where(s_pos, s, 1.0)) + m_safe, -jnp.inf)
    return jnp.squeeze(out, axis=axis)


def assemble(
    stable: jax.Array,
    log_inv_psi: jax.Array,
    T: jax.Array,
    lam: jax.Array,
    L_total: jax.Array,
    max_load: jax.Array,
    *,
    T_mean: jax.Array | None = None,
    psi_server: jax.Array | None = None,
) -> tuple[BFResult, jax.Array]:
    """Build a :class:`BFResult`; unstable points get ``psi = 0``, ``L = T = inf``, ``gamma = 0``.

    ``T`` is the mean response time per class or type, computed by the solver without dividing
    by the arrival rate (so a class of zero rate still gets its limit ``d log(1/psi) / d lam_i``);
    ``L = lam * T`` (Little) and ``gamma = 1 / T``. ``max_load`` is the largest load
    ``Lambda(L) / M(L)`` over the server sets ``L`` (the pool is stable iff it is ``< 1``);
    ``stability_margin = 1 / max_load``. ``T_mean`` defaults to ``L_total / sum(lam)``
    (Little), the mean of ``T`` when every rate is 0. Returns ``(result, stable)``, the pair
    every structured kernel returns.
    """
    if T_mean is None:
        lam_tot = jnp.sum(lam)
        pos = lam_tot > 0
        T_mean = jnp.where(pos, L_total / jnp.where(pos, lam_tot, 1.0), jnp.mean(T))
    inf = jnp.asarray(jnp.inf, T.dtype)
    T = jnp.where(stable, T, inf)
    L = jnp.where(stable, lam * T, inf)
    gamma = jnp.where(stable, 1.0 / jnp.where(stable, T, 1.0), 0.0)
    log_inv_psi = jnp.where(stable, log_inv_psi, inf)
    psi = jnp.where(stable, jnp.exp(-log_inv_psi), 0.0)
    L_total = jnp.where(stable, L_total, inf)
    T_mean = jnp.where(stable, T_mean, inf)
    busy = None
    if psi_server is not None:
        psi_server = jnp.where(stable, psi_server, 0.0)
        busy = jnp.sum(1.0 - psi_server, axis=-1)
    res = BFResult(
        psi=psi,
        log_inv_psi=log_inv_psi,
        L=L,
        T=T,
        gamma=gamma,
        L_total=L_total,
        T_mean=T_mean,
        psi_server=psi_server,
        psi_class=None,
        busy_servers=busy,
        stability_margin=1.0 / max_load,
    )
    return res, stable


def check_rho(rho, what: str = "rho") -> None:
    """Raise ``ValueError`` unless every concrete ``rho`` is finite and ``>= 0``."""
    if is_concrete(rho):
        r = np.asarray(rho, dtype=float)
        if not np.all(np.isfinite(r)) or np.any(r < 0):
            raise ValueError(f"{what} must be finite and >= 0, got {r.tolist()}")


def raise_if_unstable(stable, message_fn) -> None:
    """Raise ``ValueError(message_fn(index))`` at the first unstable concrete point."""
    if is_concrete(stable):
        s = np.asarray(stable)
        if not np.all(s):
            idx = np.flatnonzero(~s.reshape(-1))[0]
            raise ValueError(message_fn(int(idx)))


def check_num_servers(K) -> int:
    """``K`` as an int, or ``ValueError`` unless it is a positive integer."""
    if int(K) != K or K < 1:
        raise ValueError(f"K must be a positive integer number of servers, got {K!r}")
    return int(K)


def check_capacities(mu, shape: tuple[int, ...] | None = None, what: str = "servers") -> None:
    """Refuse capacities of another shape than ``shape`` (``()``: one capacity for every server;
    ``None``: a non-empty vector) or, when concrete, not finite and ``> 0`` (naming them)."""
    if shape is None and (mu.ndim != 1 or mu.shape[0] == 0):
        raise ValueError(f"mu must be a non-empty 1-d array of capacities, got {mu.shape}")
    if shape is not None and mu.shape != shape:
        kind = (
            "a scalar capacity" if shape == () else f"shape {shape}, one capacity per {what[:-1]}"
        )
        raise ValueError(f"mu must be {kind}, got shape {mu.shape}")
    if is_concrete(mu):
        m = np.atleast_1d(np.asarray(mu, dtype=float))
        bad = np.flatnonzero(~(np.isfinite(m) & (m > 0)))
        if bad.size and mu.ndim == 0:
            raise ValueError(f"mu must be finite and > 0, got {float(m[0])}")
        if bad.size:
            raise ValueError(f"mu must be finite and > 0; {what} {bad.tolist()} are not")
