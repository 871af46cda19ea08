"""Dense linear algebra of the QBD solvers: LU solves with an implicit adjoint (one batch
element at a time on the CPU), the tail matrix ``G`` by shifted cyclic reduction with its
implicit-function adjoint, and the doubling sum of a Stein equation."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array


def _one_at_a_time(f):
    """``f``, run one batch element at a time under ``vmap`` on the CPU. XLA:CPU's batched LU
    and triangular solve (jaxlib 0.10.2) split a batch over the intra-op thread pool; two of
    them running at once (the thunk executor runs independent ops concurrently) each hold a
    pool thread while waiting for the other's tasks, and on a 2-core machine
    ``jax.vmap(exact)`` hung for good. Other backends keep the batched calls. Never
    differentiated (:func:`_linsolve` factors ``stop_gradient(a)``; the reduction for ``G``
    has its own adjoint)."""
    sequential = jax.custom_batching.sequential_vmap(f)
    return functools.wraps(f)(
        lambda *args: (sequential if jax.default_backend() == "cpu" else f)(*args)
    )


@_one_at_a_time
def _lu(a: Array):
    """LU factors ``a[perm] = L U`` of ``a``."""
    lu, _, perm = lax.linalg.lu(a)
    return lu, perm


def _triangular(lu, bt, **kw):
    return lax.linalg.triangular_solve(lu, bt, left_side=False, **kw)


@_one_at_a_time
def _lu_solve(factors, b: Array) -> Array:
    """``a^-1 b`` from ``a[perm] = L U``, as triangular solves on the right of ``b^T``:
    ``x^T = b[perm]^T U^-T L^-T`` read backwards. XLA:CPU's LAPACK call takes column-major
    operands, and ``b^T`` column-major is ``b`` as stored, so nothing is copied (unlike
    ``jax.scipy.linalg.lu_solve``)."""
    lu, perm = factors
    bt = (b[:, None] if b.ndim == 1 else b).T
    y = _triangular(lu, bt[:, perm], lower=True, transpose_a=True, unit_diagonal=True)
    x = _triangular(lu, y, lower=False, transpose_a=True).T
    return x[:, 0] if b.ndim == 1 else x


@_one_at_a_time
def _lu_solve_t(factors, b: Array) -> Array:
    """``a^-T b`` from ``a[perm] = L U``: ``(x[perm])^T = b^T U^-1 L^-1``."""
    lu, perm = factors
    bt = (b[:, None] if b.ndim == 1 else b).T
    z = _triangular(lu, _triangular(lu, bt, lower=False), lower=True, unit_diagonal=True).T
    x = jnp.zeros_like(z).at[perm].set(z)
    return x[:, 0] if b.ndim == 1 else x


def _linsolve(a: Array, b: Array) -> Array:
    """``a^-1 b``, as ``jnp.linalg.solve`` (an LU of ``stop_gradient(a)`` inside
    ``lax.custom_linear_solve``, so ``jvp``, ``grad`` and ``vmap`` of ``grad`` work) with the
    factorisation of :func:`_lu` and the solves of :func:`_lu_solve`, :func:`_lu_solve_t`."""
    factors = _lu(lax.stop_gradient(a))

    return lax.custom_linear_solve(
        lambda x: a @ x,
        b,
        lambda _, x: _lu_solve(factors, x),
        lambda _, x: _lu_solve_t(factors, x),
    )


# ------------------------------------------------------------------------------ the tail: G
def _norm(x: Array) -> Array:
    return jnp.max(jnp.sum(jnp.abs(x), axis=-1))


def _g_cyclic_reduction(lam, q, D):
    """``G``, the minimal solution of ``A2 + A1 G + A0 G^2 = 0`` with ``A0 = lam I`` (up),
    ``A1 = -diag(q)`` (local), ``A2 = D`` (down), by cyclic reduction (Bini and Meini 1996) on
    the *shifted* equation (He, Meini and Rhee 2001): with ``u = 1 / P`` and ``d = D 1``,
    ``Gs = G - 1 u^T`` is the minimal solution of ``A2s + A1s Gs + A0 Gs^2 = 0``,
    ``A2s = D - d u^T``, ``A1s = A1 + lam 1 u^T``; it has the eigenvalues of ``G`` with the
    unit one moved to 0.

    One reduction step, with ``K = (-A1^(k))^-1``: ``A0' = A0 K A0``, ``A2' = A2 K A2``,
    ``A1' = A1 + A0 K A2 + A2 K A0``, ``Ahat' = Ahat + A0 K A2``; then ``Gs = -Ahat^-1 A2s``
    (the loop carries ``-A1`` and ``-Ahat``, so that no product is negated). The error falls
    like ``(xi rho(R))^(2^k)``, ``xi`` the second eigenvalue of ``G``, where without the
    shift it falls like ``rho(R)^(2^k)``: on five-class-exp 7 steps at any load instead of 9
    at 0.5 lambda_c and 18 at 0.999 (the tail decays like ``rho(R)^N``, slowly near
    saturation; ``xi`` is about 0.74 at any load). The first step is written out
    (``A1s^-1`` by Sherman-Morrison). The loop stops when the next increment of ``Ahat``,
    predicted from the last two as for quadratic convergence
    (``r_(k+1) = r_k (r_k / r_(k-1))^2``), is below machine precision relative to ``Ahat``;
    that last step only updates ``Ahat``."""
    P = D.shape[0]
    eps = jnp.finfo(D.dtype).eps
    u = jnp.full(P, 1.0 / P, D.dtype)
    iq = 1.0 / q
    a2s = D - D.sum(1)[:, None] * u[None, :]
    nloc = jnp.diag(q) - lam * u[None, :]  # -A1s
    # K = nloc^-1 = diag(iq) + c iq (u iq)^T, c = lam / (1 - lam u.iq) (Sherman-Morrison)
    c = lam / (1.0 - lam * (u @ iq))
    ui = u * iq
    K_down = iq[:, None] * a2s + c * iq[:, None] * (ui @ a2s)[None, :]
    down_K = a2s * iq[None, :] + c * (a2s @ iq)[:, None] * ui[None, :]
    one = jnp.ones((), D.dtype)
    state = (
        lam**2 * (jnp.diag(iq) + c * iq[:, None] * ui[None, :]),  # A0 K A0
        a2s @ K_down,
        nloc - lam * (K_down + down_K),
        nloc - lam * K_down,
        one,  # r_(k-1): relative increment of Ahat one step back
        one,  # r_k
        0,
    )

    def done(r_prev, r, it):
        predicted = jnp.where(it >= 2, r * jnp.minimum(1.0, (r / r_prev) ** 2), r)
        return (predicted <= eps) | (it >= 64)

    def step(c, up_times):
        up, down, nloc, nhat, _, r, it = c
        factors = _lu(nloc)
        K_down = _lu_solve(factors, down)
        cross = up_times(K_down)
        nhat = nhat - cross
        r_next = _norm(cross) / _norm(nhat)

        def reduce(_):
            K_up = _lu_solve(factors, up)
            return up_times(K_up), down @ K_down, nloc - cross - down @ K_up

        up, down, nloc = lax.cond(done(r, r_next, it + 1), lambda _: (up, down, nloc), reduce, None)
        return up, down, nloc, nhat, r, r_next, it + 1

    # the second step with A0 K A0 = lam^2 (diag(iq) + c iq (u iq)^T) applied in O(P^2)
    state = step(state, lambda x: lam**2 * iq[:, None] * (x + c * (ui @ x)[None, :]))
    nhat = lax.while_loop(lambda c: ~done(*c[4:]), lambda c: step(c, c[0].__matmul__), state)[3]
    return _linsolve(nhat, a2s) + u[None, :]


def _doubling(X, S, Y):
    """``sum_k X^k S Y^k`` for ``rho(X) < 1 = rho(Y)`` (``Y`` stochastic), by doubling."""
    eps = jnp.finfo(S.dtype).eps

    def cond(c):
        X, _, _, it = c
        return (_norm(X) > eps) & (it < 64)

    def body(c):
        X, S, Y, it = c
        return X @ X, S + X @ S @ Y, Y @ Y, it + 1

    return lax.while_loop(cond, body, (X, S, Y, 0))[1]


@jax.custom_vjp
def _g_matrix(lam, q, D):
    """``G`` of the repeating blocks (:func:`_g_cyclic_reduction`) with an implicit adjoint."""
    return _g_cyclic_reduction(lam, q, D)


def _g_matrix_fwd(lam, q, D):
    G = _g_cyclic_reduction(lam, q, D)
    return G, (G, lam, q)


def _g_matrix_bwd(res, Gbar):
    """Implicit function theorem on ``A2 + A1 G + A0 G^2 = 0``: with ``W = A1 + A0 G`` and
    ``C = dA2 + dA1 G + dA0 G^2``, ``dG = E + R dG G`` where ``E = -W^-1 C`` and
    ``R = -A0 W^-1`` (the rate matrix); so ``dG = sum_k R^k E G^k`` and its adjoint is
    ``Ebar = sum_k (R^T)^k Gbar (G^T)^k`` (summed by doubling), ``Cbar = -W^-T Ebar``."""
    G, lam, q = res
    W = -jnp.diag(q) + lam * G
    R = -lam * _linsolve(W, jnp.eye(W.shape[0], dtype=W.dtype))
    Ebar = _doubling(R.T, Gbar, G.T)
    Cbar = -_linsolve(W.T, Ebar)
    lam_bar = jnp.sum(Cbar * (G @ G))
    q_bar = -jnp.sum(Cbar * G, axis=1)
    return lam_bar, q_bar, Cbar


_g_matrix.defvjp(_g_matrix_fwd, _g_matrix_bwd)


# --------------------------------------------------- the tail with a general local block
def _g_cyclic_reduction_general(lam, A1, D):
    """``G``, the minimal solution of ``D + A1 G + lam G^2 = 0`` for a local block ``A1`` with
    off-diagonal entries (phase changes), by cyclic reduction on the shifted equation as in
    :func:`_g_cyclic_reduction` (``A2s = D - d u^T``, ``A1s = A1 + lam 1 u^T``; it needs
    ``(lam I + A1 + D) 1 = 0``). Steps until the increment of ``Ahat`` is below machine
    precision relative to it (at most 64)."""
    P = D.shape[0]
    eps = jnp.finfo(D.dtype).eps
    u = jnp.full(P, 1.0 / P, D.dtype)
    a2s = D - D.sum(1)[:, None] * u[None, :]
    nloc = -(A1 + lam * u[None, :])
    state = (lam * jnp.eye(P, dtype=D.dtype), a2s, nloc, nloc, jnp.ones((), D.dtype), 0)

    def step(c):
        up, down, nloc, nhat, _, it = c
        factors = _lu(nloc)
        K_down, K_up = _lu_solve(factors, down), _lu_solve(factors, up)
        cross = up @ K_down
        nhat = nhat - cross
        r = _norm(cross) / _norm(nhat)
        return up @ K_up, down @ K_down, nloc - cross - down @ K_up, nhat, r, it + 1

    out = lax.while_loop(lambda c: (c[4] > eps) & (c[5] < 64), step, state)
    return _linsolve(out[3], a2s) + u[None, :]


@jax.custom_vjp
def _g_matrix_general(lam, A1, D):
    """``G`` of the repeating blocks ``(lam I, A1, D)`` (:func:`_g_cyclic_reduction_general`)
    with an implicit adjoint."""
    return _g_cyclic_reduction_general(lam, A1, D)


def _g_general_fwd(lam, A1, D):
    G = _g_cyclic_reduction_general(lam, A1, D)
    return G, (G, lam, A1)


def _g_general_bwd(res, Gbar):
    """As :func:`_g_matrix_bwd` with ``W = A1 + lam G``: ``Cbar = -W^-T Ebar`` and then
    ``A1bar = Cbar G^T``, ``Dbar = Cbar``, ``lam_bar = <Cbar, G^2>``."""
    G, lam, A1 = res
    W = A1 + lam * G
    R = -lam * _linsolve(W, jnp.eye(W.shape[0], dtype=W.dtype))
    Ebar = _doubling(R.T, Gbar, G.T)
    Cbar = -_linsolve(W.T, Ebar)
    return jnp.sum(Cbar * (G @ G)), Cbar @ G.T, Cbar


_g_matrix_general.defvjp(_g_general_fwd, _g_general_bwd)
