"""Waiting-time distributions of the exact FCFS MJQM (Poisson arrivals, exponential services).

Under FCFS a job's wait depends only on the jobs ahead of it. Given the state at its arrival
(the stationary law, PASTA) the *ahead system* moves by departures and cascades only (the
QBD's down transitions ``D``), and a class-``c`` job starts once the ahead system is a none
phase ``n`` with ``a.n + a_c <= s`` (a closed set: ``a.n`` only falls). So ``P(W_c > t)`` is
the mass outside that set at time ``t`` of one pure-death chain started from the stationary
law, the same chain for every class.

The levels ``N >= N*`` are summed in closed form: from ``pi_{N*+j} = pi_{N*} R^j`` and
``R D_HH - diag(d) = lam (I - R^-1) =: Y`` (``A0 + R A1 + R^2 A2 = 0`` times ``R^-1``; ``Y``
commutes with ``R``), the mass at level ``N*`` at time ``t`` is ``pi_{N*} e^{tY}`` and the
mass at and above it ``pi_{N*} e^{tY} (I - R)^-1 1``. The chain is thus finite: one block of
head phases (``Y = lam G - diag(d)``) over the boundary levels ``N < N*``. Its transient law
is computed by uniformisation at rate ``Lambda = max d``: ``u_k`` the mass outside the start
set after ``k`` steps, ``P(W_c > t) = sum_k Poisson(k; Lambda t) u_k``; the Poisson mass
beyond the last step bounds the error. Quantiles by bisection, differentiable through the
implicit function theorem (``dq = -dF / f``). The derivation is in ``docs/concepts/exact.md``.
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import gammainc, gammaln, xlogy
from jaxtyping import Array, Float

from ..._jit import refused
from ._linalg import _g_matrix, _linsolve
from ._solve import _departure_rates, _global_down, _powers
from ._structure import _structure

__all__ = ["WaitDistribution", "wait_distribution"]

CHUNK = 512  # uniformisation steps per compiled call
MAX_STEPS = 4_000_000


@functools.lru_cache(maxsize=8)
def _tables(s: int, cores: tuple[int, ...]):
    """Static tables of the ahead system for ``(s, cores)``: the down transitions between
    the slots of levels ``0 .. N*`` (flat ``level * P + slot``, with the index of the global
    transition) and ``(levels, P, K)`` masks of the states where a class-``c`` job waits."""
    st = _structure(s, cores)
    L = st.n_star + 1
    slots = st.slots[:L]
    P = slots.shape[1]
    pad = st.n_global - 1
    assert np.array_equal(slots[st.n_star, : st.nh], np.arange(st.nh))
    slot_of = np.full((L, st.n_global), -1, dtype=np.int64)
    for N in range(L):
        ok = np.nonzero(slots[N] != pad)[0]
        slot_of[N, slots[N, ok]] = ok
    src, dst, tr = [], [], []
    for N in range(1, L):
        i, j = slot_of[N][st.d_src], slot_of[N - 1][st.d_dst]
        keep = np.nonzero((i >= 0) & (j >= 0))[0]
        src.append(N * P + i[keep])
        dst.append((N - 1) * P + j[keep])
        tr.append(keep)
    a = st.cores
    waits = np.zeros((st.n_global, len(a)))
    waits[: st.nh] = 1.0
    used = st.nvec @ a
    waits[st.nh : st.nh + st.nv] = used[:, None] + a[None, :] > s
    mask = waits[slots]
    mask[st.n_star] = 0.0  # the head block is counted through (I - R)^-1 1
    return (
        st,
        np.concatenate(src).astype(np.int32),
        np.concatenate(dst).astype(np.int32),
        np.concatenate(tr).astype(np.int32),
        mask,
    )


def _down_values(st, mu: Array, p: Array) -> Array:
    """The rate of every global down transition (the entries of :func:`_global_down`)."""
    pw = _powers(p, st.max_expo)
    mono = jnp.prod(pw[jnp.arange(len(st.cores))[None, :], st.d_expo], axis=1)
    return jnp.asarray(st.d_coef, p.dtype) * mu[st.d_cls] * mono


def _stationary(st, Dg, d, G, lam, p):
    """Stationary vectors of levels ``0 .. N*`` (padded slots, ``(N* + 1, P)``, unnormalised),
    by level reduction from the top: ``R_N = U_N K_{N+1}^-1``, ``K_N = diag(lam + d_N) -
    R_N D_{N+1}``, ``K_{N*} = diag(lam + d) - lam G``; then ``pi_{N+1} = pi_N R_N``."""
    dt = Dg.dtype
    nh, n_star = st.nh, st.n_star
    slots = jnp.asarray(st.slots[: n_star + 1])
    P = slots.shape[1]
    valid = slots != st.n_global - 1
    K = len(st.cores)
    p_ext = jnp.concatenate([p, jnp.ones(1, dt), jnp.zeros(1, dt)])
    up_slot, up_cls = jnp.asarray(st.up_slot), jnp.asarray(st.up_cls)
    k_top = jnp.eye(P, dtype=dt).at[:nh, :nh].set(jnp.diag(lam + d[:nh]) - lam * G)

    def step(k_next, N):
        w = lam * p_ext[up_cls[N]]
        U = jnp.zeros((P, P), dt).at[jnp.arange(P)[:, None], up_slot[N]].add(w)
        R = _linsolve(k_next.T, U.T).T
        down = Dg[slots[N + 1][:, None], slots[N][None, :]]
        k_N = jnp.diag(jnp.where(valid[N], lam + d[slots[N]], 1.0)) - R @ down
        return k_N, R

    _, Rs = lax.scan(step, k_top, jnp.arange(n_star - 1, -1, -1))
    Rs = Rs[::-1]
    pi0 = jnp.zeros(P, dt).at[0].set(1.0)

    def up(pi, R):
        nxt = pi @ R
        return nxt, nxt

    _, pis = lax.scan(up, pi0, Rs)
    del K
    return jnp.concatenate([pi0[None], pis], axis=0)


class _Chain(eqx.Module):
    """The uniformised ahead system: everything one step needs."""

    rate: Float[Array, ""]  # Lambda
    keep: Float[Array, "levels P"]  # 1 - d / Lambda
    vals: Float[Array, " transitions"]  # down rates / Lambda
    lam_g: Float[Array, "nh nh"]  # lam G / Lambda
    h: Float[Array, " nh"]  # (I - R)^-1 1
    mask: Float[Array, "levels P classes"]
    src: Array
    dst: Array
    tr: Array
    n_star: int = eqx.field(static=True)
    nh: int = eqx.field(static=True)

    def tails(self, b: Array) -> Array:
        """Per class, the mass of ``b`` where a class-``c`` job still waits."""
        return b[self.n_star, : self.nh] @ self.h + jnp.einsum("lp,lpc->c", b, self.mask)

    def step(self, b: Array) -> Array:
        flat = b.ravel()
        inflow = jax.ops.segment_sum(flat[self.src] * self.vals[self.tr], self.dst, flat.size)
        nb = b * self.keep + inflow.reshape(b.shape)
        return nb.at[self.n_star, : self.nh].add(b[self.n_star, : self.nh] @ self.lam_g)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _prepare(s: int, cores: tuple[int, ...], mu: Array, p: Array, lam: Array):
    """The uniformised chain and its start (the stationary law, normalised)."""
    st, src, dst, tr, mask = _tables(s, cores)
    dt = p.dtype
    Dg = _global_down(st, mu, p)
    d = _departure_rates(st, Dg)
    nh = st.nh
    q = lam + d[:nh]
    G = _g_matrix(lam, q, Dg[:nh, :nh])
    # (I - R)^-1 1 = Km^-1 K* 1 = Km^-1 d with K* = diag(q) - lam G, Km = K* - lam I
    h = _linsolve(jnp.diag(d[:nh]) - lam * G, d[:nh])
    pis = _stationary(st, Dg, d, G, lam, p)
    total = pis[: st.n_star].sum() + pis[st.n_star, :nh] @ h
    b0 = pis / total
    rate = lax.stop_gradient(jnp.max(d))
    slots = st.slots[: st.n_star + 1]
    chain = _Chain(
        rate=rate,
        keep=1.0 - d[jnp.asarray(slots)] / rate,
        vals=_down_values(st, mu, p) / rate,
        lam_g=lam * G / rate,
        h=h,
        mask=jnp.asarray(mask, dt),
        src=jnp.asarray(src),
        dst=jnp.asarray(dst),
        tr=jnp.asarray(tr),
        n_star=st.n_star,
        nh=nh,
    )
    return chain, b0


@jax.jit
def _advance(chain: _Chain, b: Array):
    """``CHUNK`` uniformisation steps from ``b``: the new state and ``u`` after each step."""

    def body(b, _):
        nb = chain.step(b)
        return nb, chain.tails(nb)

    return lax.scan(body, b, None, length=CHUNK)


class WaitDistribution(eqx.Module):
    """The waiting-time law of every class of an exact FCFS MJQM, as uniformisation steps.

    ``u[k, c]`` is the probability that a class-``c`` job still waits after ``k`` steps of
    the uniformised ahead system (rate ``rate``); the last column is the mixture over the
    classes (all jobs). ``P(W > t) = sum_k Poisson(k; rate t) u_k``, within ``tail_error(t)``
    (the Poisson mass beyond the last step, times its ``u``). Build it with
    :func:`wait_distribution` or :meth:`ExactResult.wait_distribution`.
    """

    u: Float[Array, "steps classes_plus_one"]
    rate: Float[Array, ""]

    @property
    def steps(self) -> int:
        return self.u.shape[0] - 1

    def _col(self, cls: int | None) -> Array:
        K = self.u.shape[1] - 1
        if cls is None:
            return self.u[:, K]
        if not (isinstance(cls, int | np.integer) and 0 <= int(cls) < K):
            raise ValueError(f"wait: cls must be an int in [0, {K}) or None, got {cls!r}")
        return self.u[:, int(cls)]

    def _weights(self, t):
        return _poisson_weights(self.rate, t, self.u)

    def tail(self, t, cls: int | None = None) -> Float[Array, ""]:
        """``P(W > t)`` (``W`` the wait of class ``cls``, or of any job), the lower end of the
        interval ``[tail, tail + tail_error]`` that holds the exact value."""
        t = _check_t(t)
        return self._weights(t) @ self._col(cls)

    def tail_error(self, t, cls: int | None = None) -> Float[Array, ""]:
        """Bound on ``P(W > t) - tail(t)``: ``P(Poisson(rate t) > steps) u_steps``."""
        t = _check_t(t)
        return gammainc(self.steps + 1.0, self.rate * t) * self._col(cls)[-1]

    def cdf(self, t, cls: int | None = None) -> Float[Array, ""]:
        """``P(W <= t)``."""
        return 1.0 - self.tail(t, cls)

    def p_wait(self, cls: int | None = None) -> Float[Array, ""]:
        """``P(W > 0)``, exact (no truncation)."""
        return self._col(cls)[0]

    def mean(self, cls: int | None = None) -> Float[Array, ""]:
        """``E[W] = sum_k u_k / rate`` over the steps computed (a lower bound)."""
        return self._col(cls).sum() / self.rate

    def t_reliable(self) -> Float[Array, ""]:
        """Largest ``t`` where the Poisson mass beyond the last step is negligible."""
        n = self.steps
        # float64 where enabled: one rounding of the quotient, whatever the dtype of rate
        rate = lax.stop_gradient(self.rate).astype(jnp.result_type(float))
        return max(0.0, n - 10.0 * math.sqrt(n) - 30.0) / rate

    def quantile(self, q, cls: int | None = None) -> Float[Array, ""]:
        """The ``q``-quantile ``inf {t : P(W <= t) >= q}`` by bisection on ``[0,
        t_reliable]``; differentiable by the implicit function theorem, ``dq/dx = -dF/dx /
        f`` (``f`` the density at the quantile). 0 when ``P(W > 0) <= 1 - q``. An error at
        run time when the quantile lies beyond ``t_reliable`` (compute more steps)."""
        q = _check_q(q)
        u = self._col(cls)
        rate = lax.stop_gradient(self.rate)
        us = lax.stop_gradient(u)
        hi0 = self.t_reliable().astype(u.dtype)
        tail = lambda t, v: self._weights(t) @ v  # noqa: E731
        t_star = _bisect(us, rate, lax.stop_gradient(q), hi0)
        reach = tail(hi0, us) <= 1.0 - q
        t_star = eqx.error_if(
            t_star,
            ~reach,
            refused(
                "wait_quantile: the quantile lies beyond the uniformisation steps computed "
                "(pass more steps)"
            ),
        )
        atom = us[0] <= 1.0 - q
        dens = rate * self._weights(t_star)[:-1] @ (us[:-1] - us[1:])
        safe = jnp.where(atom | (dens <= 0), 1.0, dens)
        t_q = t_star + (tail(t_star, u) - (1.0 - q)) / safe
        return jnp.where(atom, jnp.zeros_like(t_q), t_q)


def _poisson_weights(rate, t, u):
    """``Poisson(k; rate t)`` for the steps ``k`` of ``u``'s rows."""
    m = rate * t
    k = jnp.arange(u.shape[0], dtype=u.dtype)
    return jnp.exp(xlogy(k, m) - m - gammaln(k + 1.0))


@jax.jit
def _bisect(u, rate, q, hi):
    """The midpoint of 200 halvings of ``[0, hi]`` towards ``sum_k Poisson(k; rate t) u_k =
    1 - q`` (one compiled loop, the same under ``jit`` as eagerly)."""

    def halve(_, lo_hi):
        lo, hi = lo_hi
        mid = 0.5 * (lo + hi)
        above = _poisson_weights(rate, mid, u) @ u > 1.0 - q
        return jnp.where(above, mid, lo), jnp.where(above, hi, mid)

    lo, hi = lax.fori_loop(0, 200, halve, (jnp.zeros_like(hi), hi))
    return 0.5 * (lo + hi)


def _checked(x, ok, rule: str):
    """``x`` as a float when it is one number that passes ``ok`` (a tracer passes through),
    else a one-line ``ValueError`` saying ``rule``."""
    if isinstance(x, jax.core.Tracer):
        return x
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        arr = np.asarray(np.nan)
    if arr.ndim != 0 or not ok(float(arr)):
        raise ValueError(f"wait: {rule}, got {x!r}")
    return float(arr)


def _check_t(t):
    return _checked(t, lambda v: 0 <= v < math.inf, "t must be a finite number >= 0")


def _check_q(q):
    return _checked(q, lambda v: 0.0 < v < 1.0, "q must be a number in (0, 1)")


def _concrete(x) -> bool:
    return not any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(x))


def wait_distribution(
    s: int,
    cores: tuple[int, ...],
    mu: Array,
    p: Array,
    lam: Array,
    *,
    steps: int | None = None,
    quantiles=(),
    times=(),
) -> WaitDistribution:
    """The :class:`WaitDistribution` of the FCFS MJQM with ``s`` servers, class sizes
    ``cores``, service rates ``mu``, class probabilities ``p`` and arrival rate ``lam``
    (stable, checked by the caller).

    With ``steps`` given, exactly that many uniformisation steps (rounded up to a multiple
    of ``CHUNK``): ``jit`` / ``grad`` work. Otherwise (concrete inputs only) as many as the
    requested ``quantiles`` (of every class) and ``times`` need, at least until every
    ``u`` falls below ``1e-3``.
    """
    quantiles = [_check_q(q) for q in quantiles]
    times = [_check_t(t) for t in times]
    chain, b = _prepare(s, cores, mu, p, lam)
    return drive(chain, b, p, (mu, p, lam), steps=steps, quantiles=quantiles, times=times)


def drive(chain: _Chain, b: Array, p: Array, inputs, *, steps, quantiles, times):
    """Uniformisation steps of ``chain`` from ``b`` until ``steps`` (rounded up to a multiple
    of ``CHUNK``) or, without ``steps``, until the ``quantiles`` and ``times`` asked for are
    covered (then ``inputs``, the numbers ``chain`` came from, must be concrete)."""
    u0 = chain.tails(b)
    parts = [u0[None]]
    n = 0
    if steps is not None:
        for _ in range(-(-int(steps) // CHUNK)):
            b, us = _advance(chain, b)
            parts.append(us)
        return _finish(parts, p, chain.rate)
    if not _concrete(inputs):
        raise ValueError("wait: pass steps= under jit or grad (the step count must be static)")
    rate = float(chain.rate)
    floor = min([1e-3] + [0.5 * (1.0 - float(q)) for q in quantiles])
    t_max = max([0.0] + [float(t) for t in times])
    need = rate * t_max + 10.0 * math.sqrt(rate * t_max) + 30.0
    first_low = None
    while True:
        last = np.asarray(parts[-1][-1])
        if first_low is None and np.all(last <= floor):
            first_low = n
        if first_low is not None:
            need = max(need, first_low + 10.0 * math.sqrt(first_low) + 30.0)
            if n >= need:
                break
        if n >= MAX_STEPS:
            raise ValueError(
                f"wait: more than {MAX_STEPS:,} uniformisation steps (rate {rate:.4g}) are "
                "needed for these quantiles or times; ask for smaller ones"
            )
        b, us = _advance(chain, b)
        parts.append(us)
        n += CHUNK
    return _finish(parts, p, chain.rate)


def _finish(parts, p, rate) -> WaitDistribution:
    u = jnp.concatenate(parts, axis=0)
    return WaitDistribution(u=jnp.concatenate([u, (u @ p)[:, None]], axis=1), rate=rate)
