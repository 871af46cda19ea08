"""Population sums of one pool's balance function, by a recursion over a subset lattice.

For a pool with classes ``i`` (server sets ``S_i``) and rates ``lam``, some classes *marked*
(closed, or all classes of a truncated open network), this module computes, for ``n = 0..N``,

    G(n) = sum over x with |x_marked| = n of Phi(x) lam^x          (unmarked classes summed out)

in log space, ``Phi`` the balance function of ``bf-recursive`` eq. (1). Writing
``F_A(z) = sum_{x: supp x = A} Phi(x) lam^x z^{|x_marked|}`` for a set ``A`` of classes, eq. (1)
gives the recursion over class subsets

    F_A(z) (mu(S_A) - lam_open(A) - z lam_marked(A)) = sum_{i in A} lam_i z^{[i marked]} F_{A-i}(z)

and ``G(z) = sum_A F_A(z)``. Over server subsets ``L`` (``bf-recursive`` Theorem 1 with
``lam_marked -> z lam_marked``), with ``Lam(L)`` the rate of the classes whose servers lie in L,

    F_L(z) (M(L) - Lam_open(L) - z Lam_marked(L)) = sum_{k in L} mu_k F_{L-k}(z),   G = F_K.

Both are solved layer by layer (popcount order) with power series in ``z`` truncated at
``z^N``, in log space; the smaller lattice (``2^C`` or ``2^K``) is used. Dividing by
``d - z c`` is the first-order recurrence ``f_n = (b_n + c f_{n-1}) / d``, i.e.
``f_n = sum_{m <= n} (c / d)^{n - m} b_m / d``: one dense log-sum-exp over ``m`` for small
layers, a ``lax.scan`` over ``n`` for large ones. Cost ``O(2^E E N + 2^E N^2)`` (dense) with
``E = min(C, K)``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from .._memory import memory_budget

# Finite stand-in for log(0): keeps gradients free of inf - inf (exp(NEG - m) is exactly 0).
NEG = -1e30
# Largest lattice handled (2^E subsets times N + 1 coefficients must also fit in memory).
MAX_LATTICE_BITS = 18
MAX_LATTICE_CELLS = 40_000_000
# Largest convolution of the pools' series, pools x (servers + 1) x (N + 1)^2 terms (800 MB).
MAX_CONVOLUTION_CELLS = 100_000_000
# Above this many (subsets x (N + 1)^2) cells per layer, the division by (d - z c) runs as a scan.
DENSE_CELLS = 4_000_000


@dataclasses.dataclass(frozen=True, eq=False)
class _Tables:
    kind: str
    n_elems: int
    layers: tuple
    mu_ind: np.ndarray
    lam_ind: np.ndarray
    server_drop: np.ndarray


def _popcount(m: np.ndarray) -> np.ndarray:
    return np.array([bin(int(v)).count("1") for v in m], dtype=np.int64)


@functools.lru_cache(maxsize=64)
def lattice_elements(n_classes: int, n_servers: int) -> int:
    """Elements of a pool's lattice (its classes or its servers, the fewer), refused above
    ``MAX_LATTICE_BITS`` before anything is allocated."""
    E = min(n_classes, n_servers)
    if E > MAX_LATTICE_BITS:
        raise ValueError(
            f"queues: a pool with {n_classes} classes over {n_servers} servers needs a lattice "
            f"of 2^{E} subsets; at most 2^{MAX_LATTICE_BITS} is supported for closed or mixed "
            "networks (and by --engine lattice)"
        )
    return E


def check_cells(E: int, n_pools: int, n_max: int, n_servers: int = 0) -> None:
    """Refuse, before anything is allocated, a recursion of more than ``MAX_LATTICE_CELLS``
    cells (layers x pools x largest layer x (N + 1)), or convolutions of the pools' series
    (``pools x (servers + 1) x (N + 1)^2`` terms for the per-server idle probabilities) of
    more than ``MAX_CONVOLUTION_CELLS`` float64 terms or half the machine's memory."""
    cells = (E + 1) * n_pools * math.comb(E, E // 2) * (n_max + 1)
    if cells > MAX_LATTICE_CELLS:
        raise ValueError(
            f"population: the recursion needs {cells:.3g} cells (layers x pools x subsets x "
            f"(N + 1)), more than {MAX_LATTICE_CELLS:.3g}; reduce the population (or --truncate) "
            "or the number of classes per pool"
        )
    conv = n_pools * (n_servers + 1) * (n_max + 1) ** 2
    budget, label = memory_budget(8.0 * MAX_CONVOLUTION_CELLS)
    if 8.0 * conv > budget:
        raise ValueError(
            f"population: N = {n_max} needs convolutions of {conv:.3g} terms (pools x (servers "
            f"+ 1) x (N + 1)^2, about {8 * conv / 1e9:.3g} GB), more than the limit of {label}; "
            "reduce the population (or --truncate)"
        )


def lattice_tables(server_sets: tuple[tuple[int, ...], ...], n_servers: int) -> _Tables:
    """Static index tables of the recursion for one pool (server indices local, ``0..K-1``).

    Returns the lattice kind (``"class"`` or ``"server"``), per-layer masks, predecessor
    positions and element ids, the incidence of each subset with the servers (``mu_ind``: the
    servers of ``S_A`` or of ``L``) and classes (``lam_ind``: the classes of ``A`` or those with
    ``S_i`` inside ``L``), and for each server ``s`` the positions of the subsets whose
    population sums leave ``s`` idle (``server_drop``).
    """
    C, K = len(server_sets), n_servers
    kind = "class" if C <= K else "server"
    E = lattice_elements(C, K)
    masks = np.arange(2**E, dtype=np.int64)
    pc = _popcount(masks)
    order = np.lexsort((masks, pc))
    masks = masks[order]
    pc = pc[order]
    pos = np.empty(2**E, np.int64)
    starts = np.searchsorted(pc, np.arange(E + 2))
    for p in range(E + 1):
        pos[masks[starts[p] : starts[p + 1]]] = np.arange(starts[p + 1] - starts[p])
    bits = (masks[:, None] >> np.arange(E)[None, :]) & 1
    cls_srv = np.zeros((C, K), bool)
    for i, s in enumerate(server_sets):
        cls_srv[i, list(s)] = True
    if kind == "class":
        lam_ind = bits.astype(bool)
        mu_ind = (lam_ind[:, :, None] & cls_srv[None]).any(axis=1)
    else:
        mu_ind = bits.astype(bool)
        lam_ind = np.stack([mu_ind[:, list(s)].all(axis=1) for s in server_sets], axis=1)
    layers = []
    for p in range(1, E + 1):
        lm = masks[starts[p] : starts[p + 1]]
        lb = bits[starts[p] : starts[p + 1]].astype(bool)
        elem = np.stack([np.flatnonzero(row) for row in lb]).astype(np.int64)
        pred = pos[lm[:, None] ^ (np.int64(1) << elem)]
        layers.append((int(starts[p]), elem, pred))
    if kind == "class":
        # server s idle <=> no class using s is present: subsets A avoiding those classes.
        drop = (lam_ind.astype(np.int64) @ cls_srv.astype(np.int64)) == 0
    else:
        full = 2**E - 1
        drop = np.zeros((2**E, K), bool)
        for s in range(K):
            drop[np.flatnonzero(masks == (full ^ (1 << s)))[0], s] = True
    return _Tables(
        kind=kind,
        n_elems=E,
        layers=tuple(layers),
        mu_ind=mu_ind.astype(np.float64),
        lam_ind=lam_ind.astype(np.float64),
        server_drop=drop,
    )


def _safe_log(x):
    pos = x > 0
    return jnp.where(pos, jnp.log(jnp.where(pos, x, 1.0)), NEG)


def _stack_layout(tables: tuple[_Tables, ...]):
    """Pad the lattices of several pools to one layout (layers x pools x subsets)."""
    P = len(tables)
    E = max(t.n_elems for t in tables)
    sizes = [[1] + [lay[1].shape[0] for lay in t.layers] for t in tables]
    S = max(max(sz) for sz in sizes)
    K = max(t.server_drop.shape[1] for t in tables)
    elem = np.full((E, P, S, max(E, 1)), E, np.int64)  # pad element E: weight log 0
    pred = np.zeros((E, P, S, max(E, 1)), np.int64)
    sub = np.zeros((E + 1, P, S), np.int64)
    valid = np.zeros((E + 1, P, S), bool)
    total_sel = np.zeros((E + 1, P, S), bool)
    idle_sel = np.zeros((E + 1, P, S, K), bool)
    for k, t in enumerate(tables):
        n_sub = 2**t.n_elems
        sub[:, k, :] = n_sub  # pad subset: an appended entry with d = 1, r = 0
        sub[0, k, 0] = 0
        valid[0, k, 0] = True
        starts = [0] + [lay[0] for lay in t.layers]
        for p, (start, el, pr) in enumerate(t.layers, start=1):
            m = el.shape[0]
            elem[p - 1, k, :m, :p] = el
            pred[p - 1, k, :m, :p] = pr
            sub[p, k, :m] = start + np.arange(m)
            valid[p, k, :m] = True
        for p in range(t.n_elems + 1):
            m = sizes[k][p]
            rng = starts[p] + np.arange(m)
            if t.kind == "class":
                total_sel[p, k, :m] = True
            else:
                total_sel[p, k, :m] = rng == n_sub - 1
            idle_sel[p, k, :m, : t.server_drop.shape[1]] = t.server_drop[rng]
    return E, S, K, elem, pred, sub, valid, total_sel, idle_sel


def population_sums(tables: tuple[_Tables, ...], lams, mus, markeds, n_max: int):
    """Log population sums of several pools at once (one compiled recursion for all).

    All pools' lattices are padded to a common layout and run by one ``lax.scan`` over the
    popcount layers (``vmap`` over pools), itself holding a ``lax.scan`` over ``n`` for the
    division by ``d_A - z c_A``; compile time does not grow with the number of pools.

    Args:
        tables: per pool, from :func:`lattice_tables` (local server indices).
        lams: per pool, the class rates (open classes: arrival rates; marked classes: any
            positive visit ratios).
        mus: per pool, the server rates.
        markeds: per pool, a boolean numpy mask of the classes counted by ``n``.
        n_max: ``N``, the largest count kept.

    Returns:
        ``(log_G, log_G_idle, min_slack)``: ``log_G[k, n] = log G_k(n)`` for ``n = 0..N``;
        ``log_G_idle[k, s, n]`` the same sum over the states where local server ``s`` of pool
        ``k`` is idle (padded servers: ``NEG``); ``min_slack[k]`` the smallest
        ``mu(S_A) - lam_open(A)`` over nonempty subsets (``<= 0``: pool ``k`` is unstable).
    """
    dtype = jnp.result_type(*lams, *mus)
    check_cells(max(t.n_elems for t in tables), len(tables), n_max)
    E, S, K, elem, pred, sub, valid, total_sel, idle_sel = _stack_layout(tuple(tables))
    N1 = n_max + 1
    per_pool = [
        _pool_terms(t, lam, mu, marked, E, dtype)
        for t, lam, mu, marked in zip(tables, lams, mus, markeds, strict=True)
    ]
    log_ws, shifts, log_ds, log_rs, slacks = (list(x) for x in zip(*per_pool, strict=True))
    log_w = jnp.stack(log_ws)  # (P, E + 1)
    shift = np.stack(shifts)  # (P, E + 1)
    n_sub = max(ld.shape[0] for ld in log_ds)
    log_d = jnp.stack([jnp.pad(x, (0, n_sub - x.shape[0])) for x in log_ds])
    log_r = jnp.stack([jnp.pad(x, (0, n_sub - x.shape[0]), constant_values=NEG) for x in log_rs])
    P = len(tables)
    pidx = np.arange(P)[None, :, None]
    ld_layers = log_d[pidx, sub]  # (E + 1, P, S)
    lr_layers = log_r[pidx, sub]
    sh_layers = shift[np.arange(P)[None, :, None, None], elem]  # (E, P, S, E)
    f0 = jnp.full((P, S, N1), NEG, dtype).at[:, 0, 0].set(0.0)
    dense = S * N1 * N1 <= DENSE_CELLS  # dense division is faster to compile and differentiate
    if dense:
        nn = np.arange(N1)
        lag = jnp.asarray(np.maximum(nn[:, None] - nn[None, :], 0), dtype)
        lower = jnp.asarray(nn[:, None] >= nn[None, :])

    def one_pool(prev, el, pr, sh, lw, ld, lr):
        prev_shift = jnp.concatenate([jnp.full((S, 1), NEG, dtype), prev[:, :-1]], axis=1)
        both = jnp.stack([prev, prev_shift])
        terms = both[sh, pr] + lw[el][..., None]  # (S, E, N1)
        log_b = jax.nn.logsumexp(terms, axis=1)

        # Division by (d - z c): f_n = (b_n + c f_{n-1}) / d = sum_{m <= n} r^{n-m} b_m / d.
        if dense:
            expo = jnp.where(lower, lag * lr[:, None, None], NEG)  # (S, N1, N1)
            return jax.nn.logsumexp(expo + (log_b - ld[:, None])[:, None, :], axis=2)

        def step(carry, b_n):
            f_n = jnp.logaddexp(b_n - ld, lr + carry)
            return f_n, f_n

        return jax.lax.scan(step, jnp.full((S,), NEG, dtype), log_b.T)[1].T

    def layer(prev, xs):
        el, pr, sh, ld, lr = xs
        f = jax.vmap(one_pool)(prev, el, pr, sh, log_w, ld, lr)
        return f, f

    if E > 0:
        _, fs = jax.lax.scan(layer, f0, (elem, pred, sh_layers, ld_layers[1:], lr_layers[1:]))
        allf = jnp.concatenate([f0[None], fs], axis=0)  # (E + 1, P, S, N1)
    else:
        allf = f0[None]
    log_g, log_g_idle = _totals(allf, valid, total_sel, idle_sel, dtype)
    return log_g, log_g_idle, jnp.stack(slacks)


def _pool_terms(t: _Tables, lam, mu, marked, E: int, dtype):
    """One pool's inputs to the recursion: element log-weights (class rates or server rates,
    padded to ``E + 1``), their shifts in ``n`` (marked classes), the subset terms ``log d_A``
    and ``log r_A`` (``d_A = mu(S_A) - lam_open(A)``, ``r_A = lam_marked(A) / d_A``) and the
    smallest slack ``min_A d_A``."""
    marked = np.asarray(marked, bool)
    nm = jnp.asarray(marked, dtype)
    mu_sum = jnp.asarray(t.mu_ind, dtype) @ mu
    lam_open = jnp.asarray(t.lam_ind, dtype) @ (lam * (1 - nm))
    lam_mark = jnp.asarray(t.lam_ind, dtype) @ (lam * nm)
    d = mu_sum - lam_open
    log_d = jnp.log(jnp.where(d > 0, d, 1.0))
    log_r = _safe_log(lam_mark) - log_d
    pad = jnp.zeros(1, dtype)
    if t.kind == "class":
        lw, sh = _safe_log(lam), marked.astype(np.int64)
    else:
        lw, sh = jnp.log(mu), np.zeros(t.n_elems, np.int64)
    fill = E + 1 - t.n_elems
    return (
        jnp.concatenate([lw, jnp.full(fill, NEG, dtype)]),
        np.concatenate([sh, np.zeros(fill, np.int64)]),
        jnp.concatenate([log_d, pad]),
        jnp.concatenate([log_r, pad + NEG]),
        jnp.min(d[1:]),
    )


def _totals(allf, valid, total_sel, idle_sel, dtype):
    """``(log G, log G_idle)`` from the layers ``allf`` ``(E + 1, P, S, N + 1)``: the sum over
    the subsets that make up the whole pool, and per server the sum over those where it is
    idle (a matrix product of scaled exponentials: no ``(layers, P, S, K, N + 1)`` array)."""
    allf = jnp.where(jnp.asarray(valid)[..., None], allf, NEG)
    tot = jnp.where(jnp.asarray(total_sel)[..., None], allf, NEG)
    log_g = jax.nn.logsumexp(tot, axis=(0, 2))  # (P, N1)
    m = jax.lax.stop_gradient(jnp.max(allf, axis=(0, 2)))  # (P, N1)
    scaled = jnp.exp(allf - m[None, :, None, :])
    idle = jnp.einsum("lpsk,lpsn->pkn", jnp.asarray(idle_sel, dtype), scaled)
    return log_g, _safe_log(idle) + m[:, None, :]  # (P, N1), (P, K, N1)


def pool_population_sums(tables: _Tables, lam, mu, marked, n_max: int):
    """Log population sums of one pool (see :func:`population_sums` and the module docstring).

    Args:
        tables: from :func:`lattice_tables` for the pool's (local) server sets.
        lam: per-class rates, shape ``(C,)``.
        mu: per-server rates, shape ``(K,)``.
        marked: boolean numpy mask ``(C,)`` of the classes counted by ``n``.
        n_max: ``N``, the largest count kept.

    Returns:
        ``(log_G, log_G_idle, min_slack)`` of shapes ``(N + 1,)``, ``(K, N + 1)`` and ``()``.
    """
    g, gi, slack = population_sums((tables,), (lam,), (mu,), (marked,), n_max)
    return g[0], gi[0], slack[0]


def log_convolve(a, b):
    """``log (A * B)[n] = log sum_{m <= n} A[m] B[n - m]`` for log-space series of equal length."""
    n1 = a.shape[-1]
    n = np.arange(n1)
    idx = n[:, None] - n[None, :]
    valid = idx >= 0
    terms = jnp.where(valid, a[..., None, :] + b[..., np.clip(idx, 0, None)], NEG)
    return jax.nn.logsumexp(terms, axis=-1)
