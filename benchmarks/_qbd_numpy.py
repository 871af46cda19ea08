"""Plain numpy/scipy exact solution of the FCFS multiserver-job queue (MJQM) as a QBD.

The baseline of ``bench_mjqm_exact``: the same quasi-birth-death process as
``jaxqueue.mjqm.exact``, written independently with numpy and scipy only (no jax).

Model: ``s`` identical servers, Poisson arrivals of rate ``lam``, class ``i`` with probability
``p_i`` needs ``a_i`` servers for an exponential time of mean ``m_i``; strict FCFS with
head-of-line blocking.

Chain: level ``N`` = jobs in the system; phase ``(n, h)`` with ``n`` the jobs in service per
class (``a . n <= s``) and ``h`` the class of the blocked head of the queue (``a . n + a_h > s``),
or *none* when nobody waits (then ``|n| = N``). With a head, ``b = N - |n| - 1`` jobs wait behind
it, their classes not yet revealed.

* Arrival (``lam``): ``N + 1``; with nobody waiting the arrival reveals its class ``k``
  (prob. ``p_k``) and enters service if it fits, else becomes the head; otherwise the phase is
  unchanged.
* Departure of a class-``j`` job (``n_j / m_j``): ``N - 1``, ``n - e_j``, then the cascade: while
  the head fits it enters service and the next waiting job is revealed; it stops at a revealed
  head that does not fit, or when the queue is empty.

Cascades. Write ``Q[y, z]`` for the probability that an unbounded cascade starting with the
service vector ``y`` (head just admitted) passes through ``z`` (``Q = (I - T)^-1`` with
``T[x, x + e_k] = p_k`` when ``x + e_k`` fits; ``T`` is nilpotent). Reaching ``z`` takes
``|z| - |y|`` reveals, so from a phase at level ``N`` the cascade ends at the head phase
``(z, k)`` with probability ``Q[y, z] p_k`` (``z + e_k`` does not fit) when ``|z| <= N - 2``
(one more reveal for the head ``k``), and at the none phase ``z`` with probability ``Q[y, z]``
when ``|z| = N - 1`` (all waiting jobs revealed and admitted). Both conditions are exactly the
validity of the target phase at level ``N - 1``; so every down block is the sub-block of one
global matrix between the valid phases of levels ``N`` and ``N - 1`` (up blocks likewise).

Levels ``N >= K = max|n| + 1`` hold exactly the head phases, and from ``K + 1`` on the down
blocks are all head-to-head: ``A0 = lam I``, ``A1 = -diag(lam + d)``, ``A2`` = departures with
cascades. Tail ``pi_{K + j} = pi_K R^j`` with ``R = A0 (-(A1 + A0 G))^-1``, ``G`` by logarithmic
reduction (Latouche and Ramaswami 1993); levels ``0 .. K`` by linear level reduction.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

__all__ = ["solve_qbd_numpy", "lambda_c_numpy"]


def _service_vectors(s: int, a: np.ndarray) -> np.ndarray:
    """All ``n >= 0`` with ``a . n <= s``, sorted by ``|n|`` (then lexicographically)."""
    vecs = [()]
    for ai in a:
        vecs = [v + (k,) for v in vecs for k in range((s - int(np.dot(v, a[: len(v)]))) // ai + 1)]
    arr = np.array(vecs, dtype=np.int64).reshape(len(vecs), len(a))
    order = np.lexsort((*arr.T[::-1], arr.sum(1)))
    return arr[order]


class _Structure:
    """Phases and the global down/up matrices (rows: phases at ``N``, cols: at ``N -/+ 1``)."""

    def __init__(self, s, cores, probs, means):
        a = np.asarray(cores, dtype=np.int64)
        p = np.asarray(probs, dtype=float)
        p = p / p.sum()  # e.g. float32 probabilities: rows of A2 must sum exactly
        mu = 1.0 / np.asarray(means, dtype=float)
        c = len(a)
        if np.any(a < 1) or np.any(a > s):
            raise ValueError("every class needs between 1 and s servers")
        V = _service_vectors(s, a)
        nv = len(V)
        used = V @ a
        size = V.sum(1)
        index = {tuple(v): i for i, v in enumerate(V)}
        # vector + e_k, or -1 if it does not fit; vector - e_k, or -1 if n_k = 0
        plus = np.full((nv, c), -1)
        minus = np.full((nv, c), -1)
        for i, v in enumerate(V):
            for k in range(c):
                w = v.copy()
                w[k] += 1
                plus[i, k] = index.get(tuple(w), -1)
                if v[k] > 0:
                    w[k] -= 2
                    minus[i, k] = index[tuple(w)]
        fits = plus >= 0
        # head phases (n, h): n + e_h does not fit
        hv, hh = np.nonzero(~fits)
        nh = len(hv)
        head_index = np.full((nv, c), -1)
        head_index[hv, hh] = np.arange(nh)
        # global phase index: head phases 0 .. nh - 1, then none phases nh .. nh + nv - 1
        ng = nh + nv

        # cascade passage probabilities Q = (I - T)^-1 (T strictly upper triangular in |n|)
        T = np.zeros((nv, nv))
        for k in range(c):
            ok = fits[:, k]
            T[np.nonzero(ok)[0], plus[ok, k]] += p[k]
        Q = sla.solve_triangular(np.eye(nv) - T, np.eye(nv), unit_diagonal=True)
        # end of a cascade at z: head (z, k) with prob. p_k when z + e_k does not fit
        stop = np.zeros((nv, nh))
        stop[hv, np.arange(nh)] = p[hh]

        D = np.zeros((ng, ng))
        # none phases: plain departures
        for j in range(c):
            rows = np.nonzero(V[:, j] > 0)[0]
            D[nh + rows, nh + minus[rows, j]] += V[rows, j] * mu[j]
        # head phases: departure, then the head stays blocked or a cascade starts at y
        start = np.zeros((nh, nv))
        for j in range(c):
            r = np.nonzero(V[hv, j] > 0)[0]
            x = minus[hv[r], j]
            rate = V[hv[r], j] * mu[j]
            blocked = plus[x, hh[r]] < 0
            D[r[blocked], head_index[x[blocked], hh[r[blocked]]]] += rate[blocked]
            y = plus[x[~blocked], hh[r[~blocked]]]
            np.add.at(start, (r[~blocked], y), rate[~blocked])
        SQ = start @ Q
        D[:nh, :nh] += SQ @ stop
        D[:nh, nh:] += SQ

        U = np.zeros((ng, ng))
        U[np.arange(nh), np.arange(nh)] = 1.0
        for k in range(c):
            ok = fits[:, k]
            U[nh + np.nonzero(ok)[0], nh + plus[ok, k]] += p[k]
            U[nh + np.nonzero(~ok)[0], head_index[~ok, k]] += p[k]

        self.s, self.a, self.p, self.mu, self.c = s, a, p, mu, c
        self.nh, self.nv, self.ng = nh, nv, ng
        self.D, self.U = D, U  # U without the factor lam
        rate = V @ mu  # departure rate of each service vector
        self.dep = np.concatenate([rate[hv], rate])  # ... of each global phase
        self.size = np.concatenate([size[hv], size])  # |n| of each global phase
        self.idle = s - np.concatenate([used[hv], used])
        self.head = np.concatenate([hh, np.full(nv, -1)])  # class of the head, -1 = none
        # P(an arrival waits | phase): 1 with a head, P(class does not fit) without
        self.arrival_waits = np.concatenate([np.ones(nh), (~fits) @ p])
        self.max_size = int(size.max())

    def valid(self, N: int) -> np.ndarray:
        """Global indices of the phases of level ``N``."""
        sz = self.size
        ok = np.concatenate([sz[: self.nh] <= N - 1, sz[self.nh :] == N])
        return np.nonzero(ok)[0]

    def lambda_c(self) -> float:
        """Saturated departure rate: stationary law of ``A2 - diag(d)`` on the head phases."""
        nh = self.nh
        A2 = self.D[:nh, :nh]
        d = A2.sum(1)
        gen = A2 - np.diag(d)
        M = gen.copy()
        M[:, -1] = 1.0
        rhs = np.zeros(nh)
        rhs[-1] = 1.0
        phi = sla.solve(M.T, rhs)
        return float(phi @ d)


def _log_reduction_G(A0, A1, A2, tol=1e-14, max_iter=200):
    """Minimal ``G`` of ``A2 + A1 G + A0 G^2 = 0`` (Latouche-Ramaswami logarithmic reduction)."""
    n = A1.shape[0]
    lu = sla.lu_factor(-A1)
    B0 = sla.lu_solve(lu, A0)
    B2 = sla.lu_solve(lu, A2)
    G = B2.copy()
    Tm = B0.copy()
    eye = np.eye(n)
    for _ in range(max_iter):
        Um = B0 @ B2 + B2 @ B0
        lu = sla.lu_factor(eye - Um)
        B0 = sla.lu_solve(lu, B0 @ B0)
        B2 = sla.lu_solve(lu, B2 @ B2)
        step = Tm @ B2
        G += step
        Tm = Tm @ B0
        if np.max(np.abs(1.0 - G.sum(1))) < tol or np.abs(step).max() < 1e-17:
            break
    return G


def _check_stable(st: _Structure, lam: float) -> float:
    lc = st.lambda_c()
    if not lam < lc:
        raise ValueError(f"lam={lam:.6g} is not below lambda_c={lc:.6g}: the queue is unstable")
    return lc


def solve_qbd_numpy(s, cores, probs, means, lam) -> dict:
    """Stationary metrics of the exponential MJQM by the exact QBD (numpy/scipy).

    Returns:
        dict with ``wait_mean``, ``wait_mean_class`` (per class), ``queue_mean_class`` (mean
        number waiting per class), ``number_mean`` (mean number in system), ``p_wait``,
        ``idle_servers``, ``hol_idle_servers``, ``lambda_c``, ``phases`` (size of the
        repeating block), ``levels`` (boundary levels ``0 .. K``), ``residual`` (max abs of
        ``pi Q`` over the boundary, relative).
    """
    lam = float(lam)
    st = _Structure(int(s), cores, probs, means)
    lc = _check_stable(st, lam)
    nh, c = st.nh, st.c
    K = st.max_size + 1  # first level with exactly the head phases; repeating from K + 1
    H = np.arange(nh)
    A0 = lam * np.eye(nh)
    A1 = -np.diag(lam + st.dep[:nh])
    A2 = st.D[:nh, :nh]
    G = _log_reduction_G(A0, A1, A2)
    R = sla.solve((-(A1 + A0 @ G)).T, A0.T).T  # A0 (-(A1 + A0 G))^-1

    # linear level reduction from the top: pi_{N+1} = pi_N R_N
    phases = [st.valid(N) for N in range(K + 1)]
    assert np.array_equal(phases[K], H)
    M = A1 + R @ A2  # pi_K M + pi_{K-1} U_{K-1} = 0
    Rs = [None] * K
    for N in range(K - 1, -1, -1):
        rows, cols = phases[N], phases[N + 1]
        UN = lam * st.U[np.ix_(rows, cols)]
        RN = sla.solve(-M.T, UN.T).T  # U_N (-M_{N+1})^-1
        Rs[N] = RN
        L = -np.diag(lam + st.dep[rows])
        M = L + RN @ st.D[np.ix_(cols, rows)]
    pis = [np.ones(1)]
    for N in range(K):
        pis.append(pis[-1] @ Rs[N])
    residual = float(np.abs(pis[0] @ M).max())

    # functionals: sum over levels of pi_N f_N; the tail N >= K in closed form
    IR = np.eye(nh) - R
    t1 = sla.solve(IR.T, pis[K])  # pi_K (I - R)^-1
    t2 = sla.solve(IR.T, R.T @ t1)  # pi_K R (I - R)^-2  (weights of N - K)
    total = sum(x.sum() for x in pis[:K]) + t1.sum()

    prob_head = np.zeros(c)  # P(head is class i)
    behind = 0.0  # E[jobs behind the head]
    number = 0.0
    p_wait = 0.0
    idle = 0.0
    hol_idle = 0.0

    def add(w, ph, N, wN):
        """Accumulate ``w`` (weights of the phases ``ph``) at level N; wN = weights times N."""
        nonlocal behind, number, p_wait, idle, hol_idle
        hd = st.head[ph]
        is_head = hd >= 0
        np.add.at(prob_head, hd[is_head], w[is_head])
        behind_w = wN[is_head] - (st.size[ph] + 1)[is_head] * w[is_head]
        behind += behind_w.sum()
        number += wN.sum()
        p_wait += w @ st.arrival_waits[ph]
        idle += w @ st.idle[ph]
        hol_idle += w[is_head] @ st.idle[ph][is_head]

    for N in range(K):
        add(pis[N], phases[N], N, N * pis[N])
    add(t1, H, K, K * t1 + t2)

    prob_head /= total
    behind /= total
    queue_class = prob_head + st.p * behind
    wait_class = queue_class / (lam * st.p)
    return {
        "wait_mean": float(queue_class.sum() / lam),
        "wait_mean_class": wait_class,
        "queue_mean_class": queue_class,
        "number_mean": float(number / total),
        "p_wait": float(p_wait / total),
        "idle_servers": float(idle / total),
        "hol_idle_servers": float(hol_idle / total),
        "lambda_c": lc,
        "phases": int(nh),
        "levels": K + 1,
        "residual": residual / float(np.abs(M).max() + lam),
    }


def lambda_c_numpy(s, cores, probs, means) -> float:
    """Exact stability limit: departure rate of the saturated phase process."""
    return _Structure(int(s), cores, probs, means).lambda_c()
