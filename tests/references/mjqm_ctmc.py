"""Brute-force CTMC of the FCFS multiserver-job queue (MJQM) with its queue written out.

An independent reference for ``jaxqueue.mjqm.exact``, written from the model only (numpy and
scipy.sparse; nothing from ``jaxqueue``).

Model. One pool of ``s`` identical servers; Poisson arrivals of rate ``lam``; a job is of class
``i`` with probability ``p_i``, holds ``a_i`` servers at once for an exponential time of mean
``m_i`` (rate ``mu_i = 1 / m_i``). Strict FCFS: jobs enter service in arrival order, the head
of the queue enters as soon as ``a_i`` servers are free, and the jobs behind a blocked head
wait even when they would fit (head-of-line blocking).

State. ``x = (n, c)`` with ``n = (n_1, ..., n_K)`` the number of jobs in service per class
(``a . n <= s``) and ``c = (c_1, ..., c_q)`` the classes of the ``q`` waiting jobs, head first
(when ``q > 0`` the head does not fit: ``a . n + a_{c_1} > s``). Every such state is reachable
from the empty one (the jobs of ``n`` arrive first, then the queue in order). Transitions:

* arrival of a class-``k`` job, rate ``lam p_k``: it enters service if nobody waits and
  ``a . n + a_k <= s``, else it joins the end of the queue;
* departure of a class-``j`` job, rate ``n_j mu_j``: ``n -> n - e_j``, then the *cascade*:
  while the queue is non-empty and its head fits, the head enters service.

Truncation. The ordered queues make the state space grow like ``K^q``, so the queue strings
are cut: an arrival that would make the queue ``c`` is *lost* when ``q > q_max`` or when its
weight ``w(c) = prod_l theta p_{c_l}`` falls below ``eps`` (``theta`` ~ the decay rate of
``P(q)``, so ``w`` follows the size of a state's probability and the rare strings go first;
with ``eps = 0`` it is a plain cap on the queue length). Departures only shorten the queue, so
the kept states are closed under them. The truncated chain is the true one with some arrivals
lost, and its distance to it is measured by the *truncation mass*, the probability that an
arrival is lost (PASTA): ``sum_x pi(x) sum_k p_k 1{class k lost in x}`` (for a length cap,
``P(q = q_max)`` up to the arrivals that enter service). :func:`solve_mjqm` lowers ``eps``
until the truncation mass is below ``tol`` (``RuntimeError`` beyond ``max_states`` states).
Every metric of the truncated chain is off by at most a moderate multiple of this mass (in
practice 10 to 400 times it, relative, for the mean waits of light loads).

Stationary law. ``pi Q = 0``, ``pi 1 = 1``: ``pi(empty) = 1`` fixed, the other balance
equations by sparse LU (small chains) or diagonally preconditioned BiCGSTAB (LU fill-in
explodes on ordered queues), then normalised; the residual ``|pi Q|`` is checked.

Metrics (``E`` under ``pi``; ``Lq_i`` = mean number of class-``i`` jobs waiting):

* ``jobs_waiting_class[i] = Lq_i = E[#{l : c_l = i}]``, ``jobs_waiting_mean = E[q]``;
* ``wait_mean_class[i] = Lq_i / (lam p_i)`` (Little's law on the class-``i`` queue);
* ``wait_mean = sum_i p_i W_i = E[q] / lam``;
* ``jobs_service_class[i] = E[n_i]``, ``jobs_mean = E[|n| + q]``;
* ``p_wait = E[sum_k p_k 1{q > 0 or a . n + a_k > s}]`` (PASTA: an arriving job waits when
  somebody already waits or its class does not fit in the free servers);
* ``idle_servers = E[s - a . n]``, ``hol_idle_servers = E[(s - a . n) 1{q > 0}]``.

(Little's law is applied with ``lam`` itself, not the admitted rate ``lam (1 - truncation
mass)``: exact up to the truncation mass.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

__all__ = ["MJQMResult", "service_vectors", "solve_mjqm", "solve_mjqm_truncated", "erlang_c"]


@dataclass
class MJQMResult:
    """Stationary metrics of the truncated explicit-queue CTMC (see the module docstring)."""

    wait_mean: float
    wait_mean_class: np.ndarray
    jobs_mean: float
    jobs_waiting_mean: float
    jobs_waiting_class: np.ndarray
    jobs_service_class: np.ndarray
    p_wait: float
    idle_servers: float
    hol_idle_servers: float
    truncation_mass: float  # P(an arrival is lost to the truncation)
    n_states: int
    queue_probs: np.ndarray = field(repr=False)  # P(q = j), j = 0 .. longest kept queue

    FIELDS = (
        "wait_mean",
        "wait_mean_class",
        "jobs_mean",
        "jobs_waiting_mean",
        "jobs_waiting_class",
        "jobs_service_class",
        "p_wait",
        "idle_servers",
        "hol_idle_servers",
    )

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.FIELDS}


def erlang_c(c: int, lam: float, mean: float) -> tuple[float, float]:
    """M/M/c: ``(P(wait), E[wait])`` by the Erlang C formula (offered load ``a = lam m``)."""
    a = lam * mean
    rho = a / c
    if not 0 < rho < 1:
        raise ValueError("need 0 < lam m / c < 1")
    top = a**c / math.factorial(c) / (1.0 - rho)
    pw = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
    return pw, pw * mean / (c * (1.0 - rho))


def service_vectors(s: int, cores) -> np.ndarray:
    """All ``n`` (ints >= 0, one per class) with ``a . n <= s``, as rows."""
    a = [int(x) for x in cores]
    rows: list[tuple[int, ...]] = []

    def rec(i: int, rem: int, cur: tuple[int, ...]) -> None:
        if i == len(a):
            rows.append(cur)
            return
        for k in range(rem // a[i] + 1):
            rec(i + 1, rem - k * a[i], cur + (k,))

    rec(0, s, ())
    return np.asarray(rows, dtype=np.int64).reshape(len(rows), len(a))


def _queue_strings(logf: np.ndarray, log_eps: float, q_max: int) -> list[np.ndarray]:
    """Kept queue strings by length: ``out[q]`` the codes of the kept strings of length ``q``.

    A string ``(c_1, ..., c_q)`` is coded ``sum_l c_l K^(l - 1)`` (head = lowest digit: the
    head is ``code % K``, popping it ``code // K``, appending class ``k`` ``code + k K^q``).
    Kept: ``q <= q_max`` and ``sum_l logf[c_l] >= log_eps``; prefixes of kept strings are kept.
    """
    K = len(logf)
    out = [np.zeros(1, np.int64)]
    logw = np.zeros(1)
    for q in range(1, q_max + 1):
        code = (out[-1][:, None] + np.arange(K, dtype=np.int64)[None, :] * K ** (q - 1)).ravel()
        lw = (logw[:, None] + logf[None, :]).ravel()
        keep = lw >= log_eps
        if not keep.any():
            break
        out.append(code[keep])
        logw = lw[keep]
    return out


def _queue_counts(q: np.ndarray, code: np.ndarray, K: int) -> np.ndarray:
    """``(S, K)``: number of waiting jobs of each class."""
    out = np.zeros((len(q), K), np.int64)
    c = code.copy()
    for pos in range(int(q.max(initial=0))):
        live = np.nonzero(pos < q)[0]
        np.add.at(out, (live, (c % K)[live]), 1)
        c //= K
    return out


def _stationary(Q: sp.csr_matrix) -> np.ndarray:
    """``pi Q = 0``, ``pi 1 = 1`` with state 0 (the empty system) first."""
    S = Q.shape[0]
    B = Q.T.tocsr()[1:, :]
    A = B[:, 1:].tocsr()
    b = -B[:, 0].toarray().ravel()
    if S <= 4000:
        x = spla.spsolve(A.tocsc(), b)
    else:
        d = A.diagonal()
        M = spla.LinearOperator(A.shape, matvec=lambda v: v / d, dtype=float)
        x, info = spla.bicgstab(A, b, M=M, rtol=1e-15, atol=0.0, maxiter=20_000)
        if info < 0:
            raise AssertionError(f"BiCGSTAB failed (info = {info})")
    pi = np.concatenate([[1.0], x])
    pi /= pi.sum()
    resid = np.abs(Q.T @ pi).max() / np.abs(Q.diagonal()).max()
    if not (pi.min() > -1e-14 and resid < 1e-13):
        raise AssertionError(f"stationary solve inaccurate: min {pi.min():.3g}, resid {resid:.3g}")
    return np.clip(pi, 0.0, None)


class _Space:
    """The kept states ``(n, q, code)`` and the lookup of a state's index."""

    def __init__(self, s: int, a: np.ndarray, strings: list[np.ndarray]):
        K = len(a)
        self.K, self.s = K, s
        nvec = service_vectors(s, a)
        used = nvec @ a
        ns, qs, codes = [nvec], [np.zeros(len(nvec), np.int64)], [np.zeros(len(nvec), np.int64)]
        for q in range(1, len(strings)):
            head = strings[q] % K
            for v in range(len(nvec)):
                c = strings[q][used[v] + a[head] > s]
                ns.append(np.broadcast_to(nvec[v], (len(c), K)))
                qs.append(np.full(len(c), q, np.int64))
                codes.append(c)
        self.n = np.concatenate(ns)
        self.q = np.concatenate(qs)
        self.code = np.concatenate(codes)
        # per queue length: sorted keys nkey * K^q + code (fits int64 for the sizes used here)
        self.offset = np.concatenate([[0], np.cumsum(np.bincount(self.q))])
        nk = self._nkey(self.n)
        self.sorted = []
        self.order = []
        for q in range(len(strings)):
            sl = slice(self.offset[q], self.offset[q + 1])
            k = nk[sl] * K**q + self.code[sl]
            o = np.argsort(k)
            self.sorted.append(k[o])
            self.order.append(o + self.offset[q])

    def _nkey(self, n):
        k = np.zeros(len(n), np.int64)
        for i in range(self.K):
            k = k * (self.s + 1) + n[:, i]
        return k

    def index(self, n, q, code) -> np.ndarray:
        out = np.empty(len(q), np.int64)
        nk = self._nkey(n)
        for qq in np.unique(q):
            sel = np.nonzero(q == qq)[0]
            keys = nk[sel] * self.K ** int(qq) + code[sel]
            sk = self.sorted[qq]
            pos = np.minimum(np.searchsorted(sk, keys), len(sk) - 1)
            if not np.all(sk[pos] == keys):
                raise AssertionError("a transition leaves the enumerated states")
            out[sel] = self.order[qq][pos]
        return out


def solve_mjqm_truncated(
    s, cores, probs, means, lam, *, q_max: int, eps: float = 0.0, theta: float = 1.0
) -> MJQMResult:
    """The CTMC with queue strings cut at length ``q_max`` and weight ``eps`` (see above)."""
    a = np.asarray(cores, dtype=np.int64)
    p = np.asarray(probs, dtype=float)
    mu = 1.0 / np.asarray(means, dtype=float)
    K = len(a)
    if not (len(p) == len(mu) == K and np.all(a >= 1) and np.all(a <= s)):
        raise ValueError("cores, probs, means: one entry per class, 1 <= cores <= s")
    if not np.isclose(p.sum(), 1.0) or np.any(p <= 0) or lam <= 0:
        raise ValueError("probs must be a positive distribution and lam > 0")
    logf = np.log(theta * p)
    log_eps = math.log(eps) if eps > 0 else -np.inf
    strings = _queue_strings(logf, log_eps, q_max)
    sp_ = _Space(s, a, strings)
    n, q, code = sp_.n, sp_.q, sp_.code
    S = len(q)
    qc = _queue_counts(q, code, K)
    logw = qc @ logf
    used = n @ a

    rows, cols, vals = [], [], []
    lost = np.zeros(S)  # rate of lost arrivals / lam
    # arrivals
    for k in range(K):
        enter = (q == 0) & (used + a[k] <= s)
        join = ~enter & (q < len(strings) - 1) & (logw + logf[k] >= log_eps)
        lost += p[k] * ~(enter | join)
        src = np.nonzero(enter | join)[0]
        n1, q1, c1 = n[src].copy(), q[src].copy(), code[src].copy()
        e = enter[src]
        n1[e, k] += 1
        j = ~e
        c1[j] += k * np.int64(K) ** q1[j]
        q1[j] += 1
        rows.append(src)
        cols.append(sp_.index(n1, q1, c1))
        vals.append(np.full(len(src), lam * p[k]))
    # departures and cascades
    for j in range(K):
        src = np.nonzero(n[:, j] > 0)[0]
        n1, q1, c1 = n[src].copy(), q[src].copy(), code[src].copy()
        n1[:, j] -= 1
        while True:
            head = c1 % K
            go = (q1 > 0) & (n1 @ a + a[head] <= s)
            if not go.any():
                break
            n1[go, head[go]] += 1
            c1[go] //= K
            q1[go] -= 1
        rows.append(src)
        cols.append(sp_.index(n1, q1, c1))
        vals.append(n[src, j] * mu[j])
    r, c, v = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    Q = sp.csr_matrix((v, (r, c)), shape=(S, S))
    Q = (Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel())).tocsr()
    pi = _stationary(Q)

    waiting_cls = pi @ qc
    idle = s - used
    wait_prob = np.where(q[:, None] > 0, 1.0, (used[:, None] + a[None, :] > s).astype(float))
    return MJQMResult(
        wait_mean=float(waiting_cls.sum() / lam),
        wait_mean_class=waiting_cls / (lam * p),
        jobs_mean=float(pi @ (n.sum(1) + q)),
        jobs_waiting_mean=float(waiting_cls.sum()),
        jobs_waiting_class=waiting_cls,
        jobs_service_class=pi @ n,
        p_wait=float(pi @ (wait_prob @ p)),
        idle_servers=float(pi @ idle),
        hol_idle_servers=float(pi @ (idle * (q > 0))),
        truncation_mass=float(pi @ lost),
        n_states=S,
        queue_probs=np.bincount(q, weights=pi),
    )


def solve_mjqm(
    s,
    cores,
    probs,
    means,
    lam,
    *,
    tol: float = 1e-12,
    max_states: int = 300_000,
    verbose: bool = False,
) -> MJQMResult:
    """Solve the truncated CTMC, cutting ever rarer queue strings until the truncation mass
    (probability that an arrival is lost) is below ``tol``.

    ``theta`` (the weight per waiting job) is the decay rate of ``P(q = j)`` read off a first
    solve; ``eps`` is lowered in proportion to the mass still lost. Raises ``RuntimeError``
    when the next chain would exceed ``max_states`` states.
    """
    p = np.asarray(probs, dtype=float)
    K = len(p)
    q0 = 12 if K == 1 else max(4, int(math.log(3000) / math.log(K)))  # ~ 3000 strings
    res = solve_mjqm_truncated(s, cores, p, means, lam, q_max=q0)
    if res.truncation_mass < tol:
        return res
    qp = res.queue_probs
    theta = float(np.clip(qp[q0 - 2] / qp[q0 - 3], 1e-3, 0.999)) if qp[q0 - 3] > 0 else 0.5
    q_cap = _longest_queue(s, K)
    eps = 0.05 * tol  # the weight w ~ theta^q prod p follows pi, so the lost mass ~ eps
    while True:
        strings = _queue_strings(np.log(theta * p), math.log(eps), q_cap)
        size = _count_states(s, cores, strings)
        if size > max_states:
            raise RuntimeError(
                f"truncation mass {res.truncation_mass:.3g} >= {tol:g}, and the next truncation "
                f"has {size} > {max_states} states; lower the load or the number of classes"
            )
        res = solve_mjqm_truncated(s, cores, p, means, lam, q_max=q_cap, eps=eps, theta=theta)
        if verbose:
            print(
                f"theta {theta:.3f} eps {eps:.2e}: {res.n_states} states, "
                f"truncation mass {res.truncation_mass:.2e}"
            )
        if res.truncation_mass < tol:
            return res
        eps *= 0.3 * max(tol / res.truncation_mass, 1e-3)


def _longest_queue(s: int, K: int) -> int:
    """Longest queue whose state keys ``nkey K^q + code`` fit in int64."""
    return int((62 - K * math.log2(s + 1)) / max(math.log2(K), 1e-9)) if K > 1 else 10_000


def _count_states(s, cores, strings) -> int:
    a = np.asarray(cores, dtype=np.int64)
    K = len(a)
    used = service_vectors(s, a) @ a
    total = len(used)
    for q in range(1, len(strings)):
        heads = np.bincount(strings[q] % K, minlength=K)
        total += int(sum(heads[h] * np.sum(used + a[h] > s) for h in range(K)))
    return total
