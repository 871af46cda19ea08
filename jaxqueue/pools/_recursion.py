"""The recursion over server subsets (``bf-recursive`` Theorems 1 and 2), in JAX.

Subsets ``L`` of the ``K`` servers are bit masks ``0 .. 2^K - 1``. For each ``L`` the reduced
system ``|L`` keeps the servers of ``L`` and the classes whose server sets lie inside ``L``.
Its capacity ``M(L)`` and arrival rate ``Lambda(L)`` come from ``K`` passes of a subset-sum
(zeta) transform. Theorem 1 (eq. (9)), in log space::

    log(1/psi(L)) = logsumexp_{k in L} [log mu_k + log(1/psi(L - k))] - log(M(L) - Lambda(L)),

with ``psi(empty) = 1``, evaluated layer by layer in popcount order (all subsets with ``n``
servers at once, no Python loop over subsets). The layer tables depend on ``K`` only and are
passed as arguments, so one compilation serves every graph with the same ``K`` and ``I``.
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._jit import refused
from .._memory import memory_budget
from ._pool import Pool, _is_concrete
from ._result import BFResult
from ._stability import check_stable

#: Hard ceiling on the number of servers of the generic engine (int32 masks, memory).
MAX_SERVERS = 30
#: Cap on the memory budget (bytes) of one ``solve``: the default budget is this or half the
#: machine's memory, whichever is less (:func:`jaxqueue._memory.memory_budget`); larger pools
#: are refused before anything is allocated.
DEFAULT_MAX_BYTES = 8e9


@functools.lru_cache(maxsize=4)
def _layers_np(K: int) -> tuple[np.ndarray, ...]:
    masks = np.arange(1 << K, dtype=np.int32)
    pc = np.zeros(masks.shape, dtype=np.int8)
    for k in range(K):  # popcount (portable to numpy < 2)
        pc += ((masks >> k) & 1).astype(np.int8)
    order = np.argsort(pc, kind="stable").astype(np.int32)
    counts = np.bincount(pc, minlength=K + 1)
    return tuple(np.split(order, np.cumsum(counts)[:-1]))


@functools.lru_cache(maxsize=4)
def subset_layers(K: int) -> tuple[jax.Array, ...]:
    """Index tables: ``layers[n]`` holds the masks of all subsets with ``n`` servers (int32).

    Cached per ``K``; pass them to the jitted kernels as arguments (one compile per ``K``).
    Built as concrete arrays even when first called inside a trace (no cached tracers).
    """
    with jax.ensure_compile_time_eval():
        return tuple(jnp.asarray(t) for t in _layers_np(K))


def memory_estimate(
    K: int, I: int, itemsize: int = 8, *, kind: str = "solve", batch: int = 1
) -> float:
    """Rough peak memory (bytes) of the subset recursion on ``K`` servers and ``I`` classes.

    ``kind="solve"``: :func:`solve` (forward and hand-written reverse pass: a few full
    ``2^K`` arrays plus one chunk of ``(rows, K)`` temporaries); a batch of ``batch > 1`` rate
    vectors adds about ``(20 itemsize + 12)`` bytes per subset and vector.
    ``kind="autodiff"``: JAX reverse mode through
    :func:`log_inv_psi` (keeps the ``(C(K, n), K)`` gathers of every layer).
    ``kind="theorem2"``: :func:`mean_numbers_recursive` (an ``I``-vector per subset).
    """
    n = 2.0**K
    rows = min(math.comb(K, K // 2), CHUNK_ROWS)
    base = n * (8 * itemsize + 4) + rows * K * (4 * itemsize + 9)
    if kind == "solve":
        return base + (batch * n * (20 * itemsize + 12) if batch > 1 else 0.0)
    if kind == "autodiff":
        return base + K * n / 2 * (3 * itemsize + 5)
    if kind == "theorem2":
        return base + n * I * itemsize + math.comb(K, K // 2) * K * I * itemsize
    raise ValueError(f"kind must be 'solve', 'autodiff' or 'theorem2', got {kind!r}")


def check_size(
    K: int, I: int, itemsize: int, max_bytes: float | None, kind: str = "solve", batch: int = 1
):
    """Refuse, before anything is allocated, a subset recursion over ``K`` servers and ``I``
    classes (``itemsize`` bytes a float, ``batch`` rate vectors) above :data:`MAX_SERVERS` or
    the memory budget (``max_bytes``, default :data:`DEFAULT_MAX_BYTES` capped by the machine).

    Raises:
        ValueError: naming ``K``, the memory estimate and the limit.
    """
    est = memory_estimate(K, I, itemsize, kind=kind, batch=batch)
    if max_bytes is None:
        limit, label = memory_budget(DEFAULT_MAX_BYTES)
    else:
        limit, label = max_bytes, f"{max_bytes / 1e9:.3g} GB"
    if K > MAX_SERVERS or est > limit:
        if K <= MAX_SERVERS and batch > 1 and memory_estimate(K, I, itemsize, kind=kind) <= limit:
            raise ValueError(
                f"batch too large for the subset recursion: {batch} rate vectors on K={K} "
                f"servers need about {est / 1e9:.3g} GB of memory (limit {label}); "
                "split the batch into smaller calls or pass max_bytes to raise the limit"
            )
        why = (
            f"more than the {MAX_SERVERS} servers the int32 subset masks allow"
            if K > MAX_SERVERS
            else f"above the memory limit of {label}"
        )
        raise ValueError(
            f"pool too large for the generic subset recursion: K={K} servers means 2^{K} = "
            f"{2**K:,} server subsets and about {est / 1e9:.3g} GB of memory, {why}; use a "
            "structured pool (jaxqueue.pools.structured: random / line / ring assignments, "
            "polynomial in K) or pass max_bytes to raise the limit"
        )


#: Rows of a popcount layer processed at once (bounds the ``(rows, K)`` temporaries).
CHUNK_ROWS = 1 << 18


def _chunks(idx: jax.Array, batch: int = 1):
    """Static slices of a layer's index table, about ``CHUNK_ROWS / batch`` rows each."""
    n = idx.shape[0]
    step = max(CHUNK_ROWS // max(batch, 1), 1024)
    return [idx[s : s + step] for s in range(0, n, step)]


def _zeta(a: jax.Array, K: int) -> jax.Array:
    """Subset sums ``b[L] = sum_{S subset of L} a[S]`` along axis 0 by ``K`` passes."""
    rest = a.shape[1:]
    for k in range(K):
        a = a.reshape((-1, 2, 1 << k) + rest)
        a = jnp.concatenate([a[:, :1], a[:, :1] + a[:, 1:]], axis=1)
    return a.reshape((-1,) + rest)


def _superset_zeta(a: jax.Array, K: int) -> jax.Array:
    """Superset sums ``b[L] = sum_{S superset of L} a[S]`` along axis 0 by ``K`` passes."""
    rest = a.shape[1:]
    for k in range(K):
        a = a.reshape((-1, 2, 1 << k) + rest)
        a = jnp.concatenate([a[:, :1] + a[:, 1:], a[:, 1:]], axis=1)
    return a.reshape((-1,) + rest)


def _block_rows(K: int) -> int:
    return min(1 << K, 1 << 12)


def _member_blocks(masks: jax.Array, K: int, dtype, fn) -> jax.Array:
    """``fn(inside, L)`` over blocks of subsets ``L`` (``lax.map``), stacked on a leading axis.

    ``inside[r, i] = 1`` when class ``i``'s servers lie in the subset ``L[r]`` (the class is
    in the reduced system ``|L``). With a batch of rate vectors, ``Lambda(L) = inside @ lam``
    and the superset sums of the reverse pass are ``inside.T @ H``: dense products with the
    batch on the minor axis, instead of ``K`` passes of a zeta transform over ``(2^K, B)``.
    """
    rows = _block_rows(K)
    Ls = jnp.arange(1 << K, dtype=jnp.int32).reshape(-1, rows)

    def block(L):
        inside = ((masks[None, :] & ~L[:, None]) == 0).astype(dtype)
        return fn(inside, L)

    return jax.lax.map(block, Ls)


def _bits(K: int) -> jax.Array:
    return jnp.left_shift(jnp.int32(1), jnp.arange(K, dtype=jnp.int32))


def _neighbours(idx: jax.Array, K: int, count: int, *, inside: bool):
    """Neighbours of the subsets ``idx`` that differ by one server, for the batched kernel.

    ``inside=True``: the ``count`` subsets ``L - k`` for the servers ``k`` in ``L``;
    ``inside=False``: the ``count`` subsets ``L + k`` for ``k`` not in ``L``. Only those are
    gathered (not all ``K`` with a mask): half the gathers and exponentials. Returns the
    neighbour masks and the server numbers ``k``, both ``(rows, count)`` and materialised once
    (an optimisation barrier), so the gather of a ``(rows, count, B)`` block does not recompute
    its indices per element.
    """
    rest = idx if inside else jnp.bitwise_and(jnp.bitwise_not(idx), (1 << K) - 1)
    nbrs, ks = [], []
    for _ in range(count):
        low = rest & -rest  # lowest remaining bit
        nbrs.append(idx ^ low)
        ks.append(jax.lax.population_count(low - 1))
        rest = rest ^ low
    return jax.lax.optimization_barrier((jnp.stack(nbrs, 1), jnp.stack(ks, 1)))


def _take(a: jax.Array, idx: jax.Array) -> jax.Array:
    """``a[idx]`` along axis 0 for indices known to be in range (no clamping per element)."""
    return a.at[idx].get(mode="promise_in_bounds", unique_indices=idx.ndim == 1)


def _put(a: jax.Array, idx: jax.Array, v: jax.Array) -> jax.Array:
    """``a.at[idx].set(v)`` for distinct in-range indices."""
    return a.at[idx].set(v, mode="promise_in_bounds", unique_indices=True)


def _lse(vals: jax.Array) -> jax.Array:
    """``logsumexp`` over axis 1 of finite values (at least one term per row)."""
    m = jax.lax.stop_gradient(jnp.max(vals, axis=1))
    return m + jnp.log(jnp.sum(jnp.exp(vals - m[:, None]), axis=1))


def _sweep(V, log_den, mu, layers, *, forward: bool):
    """Batched recursion over popcount layers: ``V`` and ``log_den`` are ``(2^K, B)``.

    ``forward=True`` (Theorem 1, ``V = F``): ``V(L) = log sum_{k in L} mu_k e^{V(L - k)} -
    log_den(L)`` from layer 1 up; ``forward=False`` (the adjoint, ``V = A``):
    ``V(S) = log sum_{k not in S} mu_k e^{V(S + k)} - log_den(S)`` from layer ``K - 1`` down.
    The starting layer (``V[0]`` resp. ``V[2^K - 1]``) must be set.

    The previous layer is exponentiated once per subset, shifted by its column maximum ``c``
    (``E = e^{V - c} <= 1``, kept in a second ``(2^K, B)`` buffer); each subset then needs only
    a gather of ``B``-contiguous rows and a multiply-add per neighbour, and the exponential is
    paid per subset instead of per (subset, neighbour). The sum ``s`` of ``mu_k E`` is exact to
    rounding unless terms underflow: if some row of a chunk has ``s <= K tiny / eps`` that
    chunk is redone by the shifted log-sum-exp (a ``lax.cond``), so the result is the same
    log-space value in every case (float32 included).
    """
    K = mu.shape[0]
    B = V.shape[1]
    logmu = jnp.log(mu)
    fi = jnp.finfo(V.dtype)
    floor = K * fi.tiny / fi.eps
    E = jnp.zeros_like(V)
    prev = 0 if forward else K
    for n_in in range(1, K + 1) if forward else range(K - 1, 0, -1):
        Vp = _take(V, layers[prev])
        c = jax.lax.stop_gradient(jnp.max(Vp, axis=0))
        E = _put(E, layers[prev], jnp.exp(Vp - c))
        for idx in _chunks(layers[n_in], B):
            nb, k = _neighbours(idx, K, n_in if forward else K - n_in, inside=forward)
            muk = mu[k]
            lin = muk[:, 0, None] * _take(E, nb[:, 0])
            for j in range(1, nb.shape[1]):
                lin = lin + muk[:, j, None] * _take(E, nb[:, j])
            s = jax.lax.cond(
                jnp.all(lin > floor),
                lambda lin, c, nb, k, V: jnp.log(lin) + c,
                lambda lin, c, nb, k, V: _lse(logmu[k][:, :, None] + _take(V, nb)),
                *(lin, c, nb, k, V),
            )
            V = _put(V, idx, s - _take(log_den, idx))
        prev = n_in
    return V


def _forward(masks, mu, lamT, layers):
    """Theorem 1 (eq. (9)) in log space for a batch of rate vectors ``lamT`` of shape ``(I, B)``.

    Returns ``F`` of shape ``(2^K, B)`` with ``F[L] = log(1/psi(L))``, ``M(L)`` (``(2^K,)``) and
    ``Lambda(L)`` (``(2^K, B)``). The batch is the minor axis, so each gathered row is contiguous.
    """
    K = mu.shape[0]
    B = lamT.shape[1] if lamT.ndim == 2 else 1
    tail = (1,) * (lamT.ndim - 1)  # () for one vector (B = 1 kept unbatched: faster gathers)
    bits = _bits(K)
    n = 1 << K
    if lamT.ndim == 2:
        lsub = _member_blocks(masks, K, lamT.dtype, lambda inside, L: inside @ lamT)
        lsub = lsub.reshape(n, B)
    else:
        lsub = _zeta(jnp.zeros(n, lamT.dtype).at[masks].add(lamT), K)
    cap = _zeta(jnp.zeros(n, mu.dtype).at[bits].set(mu), K)
    den = cap.reshape((n,) + tail) - lsub
    # only used where the pool is stable; the guard keeps the log finite otherwise
    log_den = jnp.log(jnp.where(den > 0, den, 1.0))
    logmu = jnp.log(mu).reshape((1, K) + tail)
    F = jnp.zeros(lsub.shape, lamT.dtype)
    if lamT.ndim == 2:
        return _sweep(F, log_den, mu, layers, forward=True), cap, lsub
    for layer in layers[1:]:
        for idx in _chunks(layer, B):
            has = ((idx[:, None] & bits) != 0).reshape(idx.shape + (K,) + tail)
            vals = jnp.where(has, logmu + F[idx[:, None] ^ bits], -jnp.inf)
            F = F.at[idx].set(jax.nn.logsumexp(vals, axis=1) - log_den[idx])
    return F, cap, lsub


def _log_inv_psi_subsets(masks, mu, lam, layers):
    """``log(1/psi(L))`` for all subsets and one rate vector, with ``M(L)`` and ``Lambda(L)``."""
    return _forward(masks, mu, lam, layers)


def _margin(cap, lsub):
    """``min_L M(L) / Lambda(L)`` over subsets with ``Lambda(L) > 0`` (``inf`` if none).

    ``cap`` is ``(2^K,)``; ``lsub`` is ``(2^K,)`` or ``(2^K, B)`` (then one margin per column).
    """
    if lsub.ndim == 2:
        cap = cap[:, None]
    pos = lsub > 0
    return jnp.min(jnp.where(pos, cap / jnp.where(pos, lsub, 1.0), jnp.inf), axis=0)


_RATES_MSG = "lam must be finite and >= 0 (one rate per class)"
_MU_MSG = "mu must be finite and > 0 (one capacity per server)"
_UNSTABLE_MSG = (
    "unstable arrival rates: some set of servers L has Lambda(L) >= M(L) (eq. (5) of "
    "bf-recursive); call jaxqueue.pools.stability(pool, lam) for the bottleneck classes/servers"
)


def _adjoint(mu, F, cap, lsub, layers):
    """Reverse pass of Theorem 1: ``H(L) = G(L) / (M(L) - Lambda(L))`` for every subset.

    ``G(L) = d log(1/psi) / d log(1/psi(L))`` obeys ``G(K) = 1`` and, top layer down::

        G(S) = sum_{k not in S} mu_k H(S + k) exp(F(S) - F(S + k)),

    (the exponent is ``log psi_k`` of the reduced system ``S + k``). In log space, with
    ``A(L) = log H(L) - F(L)``, this is the forward recursion run on supersets::

        A(S) = logsumexp_{k not in S} [log mu_k + A(S + k)] - log(M(S) - Lambda(S)),

    one gather per layer and no scatter-add. ``G(S) <= 1`` (a path probability). Then
    ``d log(1/psi) / d lam_i = sum_{L superset of K_i} H(L)`` (a superset-sum transform),
    which by eq. (6) is ``T_i = L_i / lam_i``: the hand-written reverse mode of the recursion.
    Shapes: ``F`` and ``lsub`` are ``(2^K, B)`` or ``(2^K,)``.
    """
    K = mu.shape[0]
    B = F.shape[1] if F.ndim == 2 else 1
    tail = (1,) * (F.ndim - 1)
    full = (1 << K) - 1
    bits = _bits(K)
    den = cap.reshape(cap.shape + tail) - lsub
    log_den = jnp.log(jnp.where(den > 0, den, 1.0))
    logmu = jnp.log(mu).reshape((1, K) + tail)
    A = jnp.zeros_like(F).at[full].set(-log_den[full] - F[full])
    if F.ndim == 2:
        A = _sweep(A, log_den, mu, layers, forward=False)
    for layer in reversed(layers[1:-1] if F.ndim == 1 else ()):
        for idx in _chunks(layer, B):
            out = ((idx[:, None] & bits) == 0).reshape(idx.shape + (K,) + tail)
            vals = jnp.where(out, logmu + A[idx[:, None] | bits], -jnp.inf)
            A = A.at[idx].set(jax.nn.logsumexp(vals, axis=1) - log_den[idx])
    return jnp.exp(A + F).at[0].set(0.0)


def _solve_impl(masks, mu, lamB, layers, *, class_idle: bool, runtime_check: bool):
    """All metrics for a batch ``lamB`` of shape ``(B, I)``; outputs have a leading ``B`` axis."""
    K = mu.shape[0]
    B, I = lamB.shape
    lamT = lamB.T
    F, cap, lsub = _forward(masks, mu, lamT[:, 0] if B == 1 else lamT, layers)
    H = _adjoint(mu, F, cap, lsub, layers)
    # eq. (6): L_i = lam_i d log(1/psi) / d lam_i, so T_i = L_i / lam_i = d log(1/psi) / d lam_i
    if B == 1:
        T = _superset_zeta(H, K)[masks]
    else:  # T[i] = sum over L containing K_i of H(L): one (I, rows) @ (rows, B) per block
        Hb = H.reshape(-1, _block_rows(K), B)
        T = _member_blocks(masks, K, H.dtype, lambda inside, L: inside.T @ Hb[L[0] // L.shape[0]])
        T = jnp.sum(T, axis=0)
    margin = _margin(cap, lsub)
    if B == 1:
        F, T, margin = F[:, None], T[:, None], margin[None]
    T = T.T  # (B, I)
    full = (1 << K) - 1
    lip = F[full]  # (B,)
    L = lamB * T
    L_total = jnp.sum(L, axis=1)
    lam_tot = jnp.sum(lamB, axis=1)
    pos = lam_tot > 0
    T_mean = jnp.where(pos, L_total / jnp.where(pos, lam_tot, 1.0), jnp.mean(T, axis=1))
    # eq. (8): psi_k = psi / psi_{|-k}
    psi_server = jnp.exp(F[full ^ _bits(K)] - lip).T  # (B, K)
    out = dict(
        psi=jnp.exp(-lip),
        log_inv_psi=lip,
        L=L,
        T=T,
        gamma=1.0 / T,
        L_total=L_total,
        T_mean=T_mean,
        psi_server=psi_server,
        busy_servers=jnp.sum(1.0 - psi_server, axis=1),
        stability_margin=margin,
    )
    if class_idle:
        # eq. (12): psi_i = psi / psi_{|-i}, psi_{|-i} = empty probability without class i
        keep = 1 - jnp.eye(I, dtype=lamT.dtype)  # column j: class j removed
        lam_minus = (lamT[:, None, :] * keep[:, :, None]).reshape(I, I * B)
        Fm, _, _ = _forward(masks, mu, lam_minus, layers)
        lip_minus = Fm[full].reshape(I, B).T  # (B, I); the I columns are a batch
        out["psi_class"] = jnp.exp(lip_minus - lip[:, None])
    if runtime_check:
        out = check_traced(out, lamB, mu, jnp.any(~(margin > 1)))
    return out


def check_traced(out, lam, mu, unstable=False):
    """The eager checks of ``Pool.rates``, of ``mu`` and (``unstable``) of the stability
    region, for traced values: one ``eqx.branched_error_if`` (under ``jit`` the call raises
    at run time with the first failing check's line), one run-time callback for all."""
    bad = jnp.stack(
        [
            jnp.any(~(jnp.isfinite(lam) & (lam >= 0))),
            jnp.any(~(jnp.isfinite(mu) & (mu > 0))),
            jnp.asarray(unstable),
        ]
    )
    return eqx.branched_error_if(
        out,
        jnp.any(bad),
        jnp.argmax(bad),
        tuple(map(refused, (_RATES_MSG, _MU_MSG, _UNSTABLE_MSG))),
    )


@functools.lru_cache(maxsize=8)
def _solve_kernel(class_idle: bool, runtime_check: bool, max_bytes: float | None = None):
    """:func:`_solve_impl` with a batching rule that calls the batched kernel.

    Plain ``jax.vmap`` of the single-vector kernel would put the vmapped axis first
    (``(B, 2^K)`` arrays): every gather and scatter of a popcount layer then moves ``B``
    scalars ``2^K`` apart, slower than the batched kernel. The rule instead folds the
    vmapped axis into the kernel's own batch (minor, contiguous axis) and makes one call.
    Gradients use a ``custom_jvp`` whose rule is the JVP of the plain kernel (``custom_vmap``
    has no transpose), so ``grad``, ``jacrev`` and higher derivatives work as before.
    """
    impl = functools.partial(_solve_impl, class_idle=class_idle, runtime_check=runtime_check)

    @jax.custom_batching.custom_vmap
    def batched(masks, mu, lamB, layers):
        return impl(masks, mu, lamB, layers)

    @batched.def_vmap
    def _rule(axis_size, in_batched, masks, mu, lamB, layers):
        m_b, mu_b, lam_b, layers_b = in_batched
        if m_b or mu_b or any(layers_b) or not lam_b:
            axes = jax.tree_util.tree_map(lambda b: 0 if b else None, list(in_batched))
            out = jax.vmap(impl, in_axes=tuple(axes))(masks, mu, lamB, layers)
        else:
            # the folded batch is checked against the memory budget like a direct call's
            B = axis_size * lamB.shape[1]
            check_size(mu.shape[0], masks.shape[0], lamB.dtype.itemsize, max_bytes, batch=B)
            out = impl(masks, mu, lamB.reshape((-1,) + lamB.shape[2:]), layers)
            out = jax.tree_util.tree_map(lambda a: a.reshape((axis_size, -1) + a.shape[1:]), out)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    @jax.custom_jvp
    def kernel(masks, mu, lamB, layers):
        return batched(masks, mu, lamB, layers)

    @kernel.defjvp
    def _jvp(primals, tangents):
        return jax.jvp(impl, primals, tangents)

    return kernel


def _solve_call(masks, mu, lamB, layers, *, class_idle: bool, runtime_check: bool, max_bytes):
    return _solve_kernel(class_idle, runtime_check, max_bytes)(masks, mu, lamB, layers)


_solve_jit = jax.jit(_solve_call, static_argnames=("class_idle", "runtime_check", "max_bytes"))


def _lip_impl(masks, mu, lam, layers):
    F, cap, lsub = _log_inv_psi_subsets(masks, mu, lam, layers)
    return F, _margin(cap, lsub)


_lip_jit = jax.jit(_lip_impl)


def _theorem2_impl(masks, mu, lam, layers):
    F, cap, lsub = _log_inv_psi_subsets(masks, mu, lam, layers)
    den = cap - lsub
    den = jnp.where(den > 0, den, 1.0)
    K, I = mu.shape[0], lam.shape[0]
    bits = jnp.left_shift(jnp.int32(1), jnp.arange(K, dtype=jnp.int32))
    Lv = jnp.zeros((cap.shape[0], I), lam.dtype)
    for idx in layers[1:]:
        has = (idx[:, None] & bits) != 0
        preds = idx[:, None] ^ bits
        # mu_k psi_k(L), with psi_k(L) = psi(L) / psi(L - k) (eq. (8) in the reduced system)
        w = mu * jnp.exp(jnp.where(has, F[preds] - F[idx][:, None], -jnp.inf))
        inside = (masks[None, :] & ~idx[:, None]) == 0  # classes of the reduced system |L
        acc = lam * inside + jnp.einsum("ck,cki->ci", w, Lv[preds])
        Lv = Lv.at[idx].set(acc / den[idx][:, None])
    return Lv[-1], _margin(cap, lsub)


_theorem2_jit = jax.jit(_theorem2_impl)


def _prepare(pool: Pool, lam, mu, check: bool, max_bytes, kind: str = "solve"):
    lam = pool.rates(lam)
    mu = pool.mu if mu is None else jnp.asarray(mu)
    if mu.shape != (pool.num_servers,):
        raise ValueError(f"mu must have shape ({pool.num_servers},), got {mu.shape}")
    dtype = jnp.result_type(lam.dtype, mu.dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.result_type(float)
    lam, mu = lam.astype(dtype), mu.astype(dtype)
    if mu is not pool.mu and _is_concrete(mu):
        bad = np.flatnonzero(~(np.isfinite(np.asarray(mu)) & (np.asarray(mu) > 0)))
        if bad.size:
            raise ValueError(
                f"mu must be finite and > 0; servers {bad.tolist()} (0-based) have "
                f"{np.asarray(mu)[bad].tolist()}"
            )
    batch = math.prod(lam.shape[:-1]) if kind == "solve" else 1
    check_size(
        pool.num_servers, pool.num_classes, jnp.dtype(dtype).itemsize, max_bytes, kind, batch
    )
    concrete = _is_concrete(lam) and _is_concrete(mu)
    if check and concrete:
        p = pool if mu is pool.mu else Pool(pool.server_sets, mu)
        for row in np.asarray(lam).reshape(-1, pool.num_classes):
            check_stable(p, row)
    masks = jnp.asarray(pool.class_masks.astype(np.int32))
    return masks, mu, lam, subset_layers(pool.num_servers), concrete


def solve(
    pool: Pool,
    lam,
    *,
    mu=None,
    check: bool = True,
    class_idle: bool | None = None,
    max_bytes: float | None = None,
) -> BFResult:
    """Exact balanced-fairness metrics of any pool by the recursion over server subsets.

    Computes ``log(1/psi)`` for every reduced system ``|L`` (Theorem 1, eq. (9)); then
    ``psi = psi(K)``, the server idle probabilities ``psi_k = psi / psi_{|-k}`` (eq. (8)), the
    mean numbers ``L_i = lam_i d log(1/psi) / d lam_i`` (eq. (6), reverse-mode derivative of the
    recursion; equal to Theorem 2, see :func:`mean_numbers_recursive`), ``T_i = L_i / lam_i``
    (Little; finite also for ``lam_i = 0``: the response time of a lone class-i job in the
    stationary system), ``gamma_i = 1 / T_i``, the mean number of busy servers
    ``sum_k (1 - psi_k)`` and, optionally, the class idle probabilities
    ``psi_i = psi / psi_{|-i}`` (eq. (12)). Cost ``O((I + K) 2^K)`` time, ``O(2^K)`` memory
    (a few full subset arrays plus one chunk of ``(rows, K)`` temporaries per layer).

    ``lam`` may carry leading batch axes (``(..., I)``): one kernel call handles the whole batch
    (batch on the minor axis of the subset arrays, linear-space layer sweeps, ``Lambda(L)`` and
    the superset sums as dense products). ``jax.vmap`` of single-vector calls runs the same
    batched kernel (a ``custom_vmap`` rule), so both routes cost the same.
    ``solve`` also works under ``jit``, ``vmap`` and ``grad`` (in ``lam`` and ``mu``); the
    reverse pass is plain JAX code, so higher derivatives work too.

    A :class:`TypedPool` (many servers of few types) is solved exactly as its aggregated pool,
    one server per type of capacity ``counts[t] mu[t]`` (same balance function, eq. (1); see
    :mod:`jaxqueue.pools._typed`): ``2^T`` type subsets; ``psi_server`` is then per type and
    ``busy_servers`` counts servers, ``sum_t counts[t] (1 - psi_server[t])``.

    Args:
        pool: the pool (``K <= 30`` servers and within ``max_bytes``), or a typed pool
            (``T <= 30`` types).
        lam: arrival rates, shape ``(..., I)``.
        mu: optional capacities overriding ``pool.mu`` (handy for gradients in ``mu``; per
            type for a typed pool).
        check: refuse unstable rates. With concrete inputs a ``ValueError`` names the
            bottleneck classes and servers (LP of :func:`stability`, run only when the exact
            margin ``min_L M(L) / Lambda(L)`` computed by the kernel is ``<= 1``); with traced
            inputs the kernel raises at run time (``eqx.error_if``).
        class_idle: also compute ``psi_class`` (``I`` extra recursions); default: only when
            ``I * 2^K <= 2^18``.
        max_bytes: memory budget; default :data:`DEFAULT_MAX_BYTES`.

    Returns:
        :class:`BFResult` (``stability_margin`` holds ``min_L M(L)/Lambda(L)``).

    Raises:
        ValueError: malformed rates, unstable rates (naming bottleneck classes and servers,
            0-based), or a pool too large (naming ``K`` and the memory estimate).

    Examples:
        >>> res = solve(Pool([[0, 2], [1, 2]], [1.0, 1.0, 1.0]), [0.9, 0.9])
        >>> float(res.psi)  # doctest: +SKIP
    """
    if not isinstance(pool, Pool):  # a typed pool solves its aggregated pool by this kernel
        return pool._bf_solve(lam, mu, check, class_idle, max_bytes)
    # the kernel computes the exact margin min_L M(L) / Lambda(L); the LP (which names the
    # bottleneck) runs only when that margin says unstable
    masks, mu, lam, layers, concrete = _prepare(pool, lam, mu, False, max_bytes)
    if class_idle is None:
        class_idle = pool.num_classes * 2**pool.num_servers <= 2**18
    runtime_check = bool(check and not concrete)
    batch = lam.shape[:-1]
    flat = lam.reshape(-1, lam.shape[-1])
    out = _solve_jit(
        masks,
        mu,
        flat,
        layers,
        class_idle=bool(class_idle),
        runtime_check=runtime_check,
        max_bytes=None if max_bytes is None else float(max_bytes),
    )
    if check and concrete:
        margins = np.asarray(out["stability_margin"])
        bad = np.flatnonzero(~(margins > 1))
        if bad.size:
            p = pool if mu is pool.mu else Pool(pool.server_sets, mu)
            check_stable(p, np.asarray(flat[bad[0]]))
            raise ValueError(
                f"unstable arrival rates (rate vector {int(bad[0])}): stability margin "
                f"{float(margins[bad[0]]):.6g} <= 1 (some set of servers L has Lambda(L) >= M(L))"
            )
    out = jax.tree_util.tree_map(lambda a: a.reshape(batch + a.shape[1:]), out)
    return BFResult(**out)


def log_inv_psi(pool: Pool, lam, mu=None) -> jax.Array:
    """``log(1/psi)`` of the whole pool (Theorem 1), differentiable in ``lam`` and ``mu``.

    ``lam_i * d/d lam_i`` of it is ``L_i`` (eq. (6)); no stability check (the caller's job:
    see :func:`solve`), but an unstable ``lam`` raises at run time. A typed pool is taken as
    its aggregated pool (as in :func:`solve`; ``mu`` per type).
    """
    if not isinstance(pool, Pool):  # a typed pool: its aggregated pool
        pool, mu = pool._bf_kernel_pool(mu)
    masks, mu, lam, layers, _ = _prepare(pool, lam, mu, False, None, "autodiff")
    F, margin = _lip_jit(masks, mu, lam, layers)
    return eqx.error_if(F[-1], ~(margin > 1), refused(_UNSTABLE_MSG))


def subset_log_inv_psi(pool: Pool, lam, mu=None) -> jax.Array:
    """``log(1/psi(L))`` for every reduced system ``|L``, indexed by the server bit mask ``L``.

    Entry ``2^K - 1`` is the whole pool; ``psi_k = exp(F[full ^ (1 << k)] - F[full])``.
    """
    masks, mu, lam, layers, _ = _prepare(pool, lam, mu, False, None)
    F, margin = _lip_jit(masks, mu, lam, layers)
    return eqx.error_if(F, ~(margin > 1), refused(_UNSTABLE_MSG))


def mean_numbers_recursive(pool: Pool, lam, mu=None, *, max_bytes: float | None = None):
    """Mean numbers of jobs ``L_i`` by the Theorem 2 recursion (eq. (13) of ``bf-recursive``)::

        L_i(L) = (lam_i + sum_{k in L} mu_k psi_k(L) L_i(L - k)) / (M(L) - Lambda(L))

    for classes inside ``L`` (``L_i(L) = 0`` otherwise), ``psi_k(L) = psi(L) / psi(L - k)``.
    Keeps an ``I``-vector per subset (``O(I 2^K)`` memory): an independent route to the
    gradient route of :func:`solve`, for checks and small pools.

    Raises:
        ValueError: as :func:`solve` (stability checked by LP).
    """
    masks, mu, lam, layers, _ = _prepare(pool, lam, mu, True, max_bytes, "theorem2")
    L, margin = _theorem2_jit(masks, mu, lam, layers)
    return eqx.error_if(L, ~(margin > 1), refused(_UNSTABLE_MSG))


def _unchecked_impl(masks, mu, lamB, layers):
    K = mu.shape[0]
    n = 1 << K
    cap = _zeta(jnp.zeros(n, mu.dtype).at[_bits(K)].set(mu), K)
    lsub = _zeta(jnp.zeros((n, lamB.shape[0]), lamB.dtype).at[masks].add(lamB.T), K)
    margin = _margin(cap, lsub)  # (B,), from the true rates: its gradient feeds a barrier
    stable = margin > 1
    # double where: unstable rows run the kernel at lam = 0 (finite, unused values), so the
    # masked-out branch has finite gradients instead of NaN
    safe = jnp.where(stable[:, None], lamB, jnp.zeros_like(lamB))
    out = _solve_impl(masks, mu, safe, layers, class_idle=False, runtime_check=False)
    s1 = stable[:, None]
    inf = jnp.asarray(jnp.inf, lamB.dtype)
    return dict(
        psi=jnp.where(stable, out["psi"], 0.0),
        log_inv_psi=jnp.where(stable, out["log_inv_psi"], inf),
        L=jnp.where(s1, out["L"], inf),
        T=jnp.where(s1, out["T"], inf),
        gamma=jnp.where(s1, out["gamma"], 0.0),
        L_total=jnp.where(stable, out["L_total"], inf),
        T_mean=jnp.where(stable, out["T_mean"], inf),
        psi_server=jnp.where(s1, out["psi_server"], 0.0),
        busy_servers=jnp.where(stable, out["busy_servers"], float(K)),
        stability_margin=margin,
        stable=stable,
    )


_unchecked_jit = jax.jit(_unchecked_impl)


def solve_unchecked(pool: Pool, lam, *, mu=None, max_bytes: float | None = None) -> dict:
    """The kernel of :func:`solve` without the stability check, for optimisers and barriers.

    Same recursion and formulas as :func:`solve` (Theorem 1, eq. (9); ``L_i`` by eq. (6),
    ``psi_k`` by eq. (8)), but never raises on unstable rates: it reports them. Where the
    rates are unstable (``min_L M(L) / Lambda(L) <= 1``, eq. (5)) the delays ``L``, ``T``,
    ``L_total``, ``T_mean`` and ``log_inv_psi`` are ``inf``, ``gamma``, ``psi`` and
    ``psi_server`` are 0 and ``busy_servers`` is ``K``. The kernel then runs on ``lam = 0``
    (double-``where``), so gradients stay finite (zero through the masked metrics) everywhere,
    while ``stability_margin`` is always computed from the true rates and keeps its gradient.
    Works under ``jit`` with traced ``lam`` and ``mu`` (also through a ``Pool`` built from a
    traced ``mu``), ``vmap``, ``grad`` and ``jvp`` / ``jacfwd``. ``psi_class`` is not computed.

    Args:
        pool: the pool (``K <= 30`` servers and within ``max_bytes``), or a typed pool (solved
            as its aggregated pool, as :func:`solve` does).
        lam: arrival rates, shape ``(..., I)`` (leading axes are a batch).
        mu: optional capacities overriding ``pool.mu`` (per type for a typed pool).
        max_bytes: memory budget (estimated for reverse-mode autodiff through the kernel);
            default :data:`DEFAULT_MAX_BYTES`.

    Returns:
        dict with the fields of :class:`BFResult` except ``psi_class`` (``psi``,
        ``log_inv_psi``, ``L``, ``T``, ``gamma``, ``L_total``, ``T_mean``, ``psi_server``,
        ``busy_servers``, ``stability_margin = min_L M(L) / Lambda(L)``) and ``stable``
        (boolean, ``stability_margin > 1``), each with the batch axes of ``lam``.

    Raises:
        ValueError: malformed rates or capacities (checked when concrete), or a pool too large.

    Examples:
        >>> out = solve_unchecked(Pool([[0, 2], [1, 2]], [1.0, 1.0, 1.0]), [2.0, 2.0])
        >>> bool(out["stable"]), float(out["T"][0])  # doctest: +SKIP
        (False, inf)
    """
    if not isinstance(pool, Pool):  # a typed pool solves its aggregated pool by this kernel
        return pool._bf_unchecked(lam, mu, max_bytes)
    masks, mu, lam, layers, _ = _prepare(pool, lam, mu, False, max_bytes, "autodiff")
    batch = lam.shape[:-1]
    out = _unchecked_jit(masks, mu, lam.reshape(-1, lam.shape[-1]), layers)
    return jax.tree_util.tree_map(lambda a: a.reshape(batch + a.shape[1:]), out)
