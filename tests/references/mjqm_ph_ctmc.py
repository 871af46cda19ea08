"""Brute-force CTMCs of the FCFS multiserver-job queue with phase-type services.

A test reference written from the model's definition only (numpy and scipy); nothing from
``jaxqueue`` is read or imported, and no code is shared with :mod:`tests.references.mjqm_ctmc`.

Model. ``s`` identical servers; Poisson arrivals of rate ``lam``; an arrival is of class ``i``
w.p. ``probs[i]``, holds ``cores[i]`` servers while in service and has a phase-type service
time ``PH(alphas[i], Ts[i])`` (``alpha`` sums to 1, exit rates ``t = -T 1``). Strict FCFS with
head-of-line blocking: jobs enter service in arrival order, the head enters as soon as
``cores[head]`` servers are free, nobody overtakes it.

Explicit chain (:func:`build`, :func:`solve`). State ``(serving, queue)``: ``serving`` the
sorted tuple of ``(class, phase)`` of the jobs in service, ``queue`` the tuple of the waiting
classes, head first (a non-empty queue has a head that does not fit). Arrivals that find
``max_jobs`` jobs in the system are blocked (lost), and optionally those that would make a rare
queue string (``min_weight``, ``theta``: see :func:`build`); ``truncation_mass`` is the
probability that an arrival is blocked (PASTA). Every metric is exact for the truncated chain
(Little's law with the admitted rate per class) and within a moderate multiple of
``truncation_mass`` of the untruncated queue (10 to 100 times it, relative, in the tables).

Waiting times (:meth:`PHChain.wait_tail`). Under FCFS the jobs behind a tagged job never
start before it, so a tagged class-``k`` arrival that finds (and is admitted to) state ``x``
waits for the absorption time of the chain *without arrivals* started at ``x``, restricted to
the states where a class-``k`` job appended to the queue would still wait (queue non-empty,
or fewer than ``cores[k]`` servers free). ``P(W_k > t) = pi_k exp(Q_k t) 1`` with ``pi_k``
the stationary law on those states over the admitted mass; computed by uniformisation
(``method="uniformization"``) or ``scipy.sparse.linalg.expm_multiply`` (``"expm"``).

Saturated chain (:func:`lambda_c`). Infinitely many jobs waiting, classes i.i.d. ``probs``:
state ``(serving, head)``; the stationary departure rate of its closed class is ``lambda_c``.

Tables. :data:`REFERENCE_SYSTEMS` (five small PH systems: 2-3 classes, s <= 6, Erlang-2/3,
hyperexponential, Coxian) and :data:`REFERENCE_VALUES` (their metrics, 12 digits, from
:func:`reference_values` at a cut of mass <= 1e-9; ``coarse_spread``: the largest relative
change from a coarser cut; ``error_estimate``: that spread scaled by the ratio of the masses).
``wait_tail`` is ``P(W > t)`` at :data:`REFERENCE_TIMES`; ``wait_tail_class[i][k]`` is class
``k`` at ``REFERENCE_TIMES[i]``; quantiles at :data:`REFERENCE_QUANTILE`.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
import scipy.sparse.linalg as spla

__all__ = [
    "PHChain",
    "PHResult",
    "REFERENCE_QUANTILE",
    "REFERENCE_SYSTEMS",
    "REFERENCE_TIMES",
    "REFERENCE_VALUES",
    "build",
    "coxian",
    "erlang",
    "exponential",
    "hyperexp",
    "lambda_c",
    "mean_service",
    "ph_sampler",
    "reference_values",
    "solve",
    "wait_quantile",
    "wait_tail",
]


# ---------------------------------------------------------------------------------------------
# Phase-type laws as (alpha, T)
# ---------------------------------------------------------------------------------------------


def exponential(mean: float) -> tuple[np.ndarray, np.ndarray]:
    return np.array([1.0]), np.array([[-1.0 / mean]])


def erlang(k: int, mean: float) -> tuple[np.ndarray, np.ndarray]:
    """Erlang-``k`` of the given mean: ``k`` phases in series, each of rate ``k / mean``."""
    r = k / mean
    T = -r * np.eye(k) + r * np.eye(k, k, 1)
    alpha = np.zeros(k)
    alpha[0] = 1.0
    return alpha, T


def hyperexp(probs, means) -> tuple[np.ndarray, np.ndarray]:
    """Mixture of exponentials: phase ``i`` w.p. ``probs[i]``, mean ``means[i]``."""
    return np.asarray(probs, float), -np.diag(1.0 / np.asarray(means, float))


def coxian(rates, cont) -> tuple[np.ndarray, np.ndarray]:
    """Coxian: phase ``i`` of rate ``rates[i]``, then phase ``i + 1`` w.p. ``cont[i]``, else
    exit (``len(cont) == len(rates) - 1``)."""
    rates = np.asarray(rates, float)
    m = len(rates)
    T = -np.diag(rates)
    for i in range(m - 1):
        T[i, i + 1] = rates[i] * cont[i]
    alpha = np.zeros(m)
    alpha[0] = 1.0
    return alpha, T


def mean_service(alpha, T) -> float:
    """``alpha (-T)^{-1} 1``."""
    T = np.asarray(T, float)
    return float(np.asarray(alpha, float) @ np.linalg.solve(-T, np.ones(len(T))))


def _check(s, cores, probs, alphas, Ts):
    s = int(s)
    cores = tuple(int(c) for c in cores)
    probs = tuple(float(p) for p in probs)
    K = len(cores)
    if not (len(probs) == len(alphas) == len(Ts) == K) or K == 0:
        raise ValueError("cores, probs, alphas, Ts: one entry per class")
    if any(not 1 <= c <= s for c in cores):
        raise ValueError(f"cores must be in [1, {s}]")
    if any(p <= 0 for p in probs) or abs(sum(probs) - 1.0) > 1e-12:
        raise ValueError("probs must be a positive distribution")
    al, Tl, ex = [], [], []
    for a, T in zip(alphas, Ts, strict=True):
        a = np.asarray(a, float).ravel()
        T = np.atleast_2d(np.asarray(T, float))
        if T.shape != (len(a), len(a)) or abs(a.sum() - 1.0) > 1e-12 or np.any(a < 0):
            raise ValueError("each alpha must be a distribution over the phases of its T")
        t = -T.sum(axis=1)
        off = T - np.diag(np.diag(T))
        if np.any(off < 0) or np.any(t < -1e-12):
            raise ValueError("each T must be a sub-generator")
        al.append(a)
        Tl.append(T)
        ex.append(np.clip(t, 0.0, None))
    return s, cores, probs, al, Tl, ex


class _Model:
    """Shared pieces: phase moves, the start of a job, the FCFS cascade."""

    def __init__(self, s, cores, probs, alphas, Ts):
        self.s, self.cores, self.probs, self.alphas, self.Ts, self.exits = _check(
            s, cores, probs, alphas, Ts
        )
        self.K = len(self.cores)

    def used(self, serving) -> int:
        return sum(self.cores[k] for k, _ in serving)

    def start(self, serving, k) -> list[tuple[tuple, float]]:
        """``serving`` with a class-``k`` job added in each initial phase, with its prob."""
        return [
            (tuple(sorted(serving + ((k, j),))), float(a))
            for j, a in enumerate(self.alphas[k])
            if a > 0
        ]

    def service_moves(self, serving):
        """``(rate, serving', departed)`` for every phase change and completion."""
        out = []
        for (k, j), c in _counts(serving).items():
            pos = serving.index((k, j))
            rest = serving[:pos] + serving[pos + 1 :]
            T = self.Ts[k]
            for j2 in range(len(T)):
                if j2 != j and T[j, j2] > 0:
                    out.append((c * T[j, j2], tuple(sorted(rest + ((k, j2),))), False))
            if self.exits[k][j] > 0:
                out.append((c * self.exits[k][j], rest, True))
        return out

    def cascade(self, serving, queue) -> dict:
        """Law of ``(serving, queue)`` after the heads that fit enter service, in order."""
        out: dict = {}
        stack = [(serving, queue, 1.0)]
        while stack:
            sv, q, p = stack.pop()
            if q and self.used(sv) + self.cores[q[0]] <= self.s:
                for sv2, pa in self.start(sv, q[0]):
                    stack.append((sv2, q[1:], p * pa))
            else:
                out[(sv, q)] = out.get((sv, q), 0.0) + p
        return out


def _counts(serving) -> dict:
    out: dict = {}
    for x in serving:
        out[x] = out.get(x, 0) + 1
    return out


# ---------------------------------------------------------------------------------------------
# The explicit truncated chain
# ---------------------------------------------------------------------------------------------


@dataclass
class PHResult:
    """Stationary metrics of the truncated explicit chain (see the module docstring)."""

    wait_mean: float
    wait_mean_class: np.ndarray
    response_mean_class: np.ndarray  # wait + mean service, per class
    service_mean_class: np.ndarray
    jobs_mean: float  # in the system
    jobs_mean_class: np.ndarray  # in the system, per class
    jobs_waiting_class: np.ndarray
    jobs_service_class: np.ndarray
    p_wait: float
    p_wait_class: np.ndarray
    throughput: float  # departures per unit time, = lam (1 - truncation_mass)
    truncation_mass: float  # P(an arrival is blocked)
    n_states: int
    queue_probs: np.ndarray = field(repr=False)  # P(q = j) jobs waiting, j = 0, 1, ...
    chain: PHChain = field(repr=False)

    def wait_tail(self, t, method: str = "uniformization"):
        """``(P(W > t), P(W_k > t) per class)`` for each ``t`` (arrays ``(n_t,)``, ``(n_t, K)``)."""
        return self.chain.wait_tail(t, method=method)

    def wait_quantile(self, q: float, klass: int | None = None, *, rtol: float = 1e-12) -> float:
        """Smallest ``t`` with ``P(W <= t) >= q`` (overall or of one class), by bisection."""
        return self.chain.wait_quantile(q, klass, rtol=rtol)


class PHChain:
    """The explicit truncated chain: states, generator, stationary law."""

    def __init__(
        self,
        s,
        cores,
        probs,
        alphas,
        Ts,
        lam,
        *,
        max_jobs,
        min_weight=0.0,
        theta=1.0,
        max_states=2_000_000,
    ):
        if not lam > 0:
            raise ValueError("lam must be positive")
        m = self.model = _Model(s, cores, probs, alphas, Ts)
        self.lam = float(lam)
        self.max_jobs = int(max_jobs)
        K = m.K
        empty = ((), ())
        index = {empty: 0}
        states = [empty]
        weight = {(): 1.0}  # prod of theta probs[c] over a queue string
        todo = deque([empty])
        blocked = []  # per state, the classes whose arrival is blocked
        arr = ([], [], [])  # rows, cols, rates of arrivals
        svc = ([], [], [])  # rows, cols, rates of phase changes and completions (cascades)

        def add(bucket, i, key, rate):
            j = index.get(key)
            if j is None:
                if len(states) >= max_states:
                    raise RuntimeError(f"more than {max_states} states: cut harder")
                j = index[key] = len(states)
                states.append(key)
                todo.append(key)
            bucket[0].append(i)
            bucket[1].append(j)
            bucket[2].append(rate)

        while todo:
            key = todo.popleft()
            i = index[key]
            serving, queue = key
            blk = np.zeros(K, bool)
            for k in range(K):
                r = self.lam * m.probs[k]
                if len(serving) + len(queue) >= self.max_jobs:
                    blk[k] = True
                elif not queue and m.used(serving) + m.cores[k] <= m.s:
                    for sv2, pa in m.start(serving, k):
                        add(arr, i, (sv2, ()), r * pa)
                else:
                    q2 = queue + (k,)
                    w = weight.get(q2)
                    if w is None:
                        w = weight[q2] = weight[queue] * theta * m.probs[k]
                    if w < min_weight:
                        blk[k] = True
                    else:
                        add(arr, i, (serving, q2), r)
            blocked.append(blk)
            for rate, sv2, departed in m.service_moves(serving):
                if departed:
                    for key2, p in m.cascade(sv2, queue).items():
                        add(svc, i, key2, rate * p)
                else:
                    add(svc, i, (sv2, queue), rate)

        n = self.n_states = len(states)
        self.states = states
        self.Q_arr = sp.csr_matrix((arr[2], (arr[0], arr[1])), shape=(n, n))
        self.Q_svc = sp.csr_matrix((svc[2], (svc[0], svc[1])), shape=(n, n))
        used = np.array([m.used(sv) for sv, _ in states])
        qlen = np.array([len(q) for _, q in states])
        self.n_wait = np.zeros((n, K))
        self.n_serv = np.zeros((n, K))
        for i, (sv, q) in enumerate(states):
            for k in q:
                self.n_wait[i, k] += 1
            for k, _ in sv:
                self.n_serv[i, k] += 1
        self.admitted = ~np.array(blocked)  # (n, K): a class-k arrival is admitted
        # would a class-k job appended now wait?
        self.waits = (qlen[:, None] > 0) | (used[:, None] + np.array(m.cores)[None, :] > m.s)
        self.pi = _stationary_irreducible(self.Q_arr + self.Q_svc)
        self._tagged_cache: dict = {}

    # -- stationary metrics -------------------------------------------------------------------
    def result(self) -> PHResult:
        m, pi = self.model, self.pi
        p = np.array(m.probs)
        adm = pi @ self.admitted  # P(a class-k arrival is admitted), per class
        rate = self.lam * p * adm  # admitted arrival rate per class
        Lq = pi @ self.n_wait
        Ls = pi @ self.n_serv
        svc = np.array([mean_service(a, T) for a, T in zip(m.alphas, m.Ts, strict=True)])
        pw = pi @ (self.admitted & self.waits) / adm
        W = Lq / rate
        share = rate / rate.sum()  # class mix of the admitted jobs
        return PHResult(
            wait_mean=float(share @ W),
            wait_mean_class=W,
            response_mean_class=W + svc,
            service_mean_class=svc,
            jobs_mean=float(Lq.sum() + Ls.sum()),
            jobs_mean_class=Lq + Ls,
            jobs_waiting_class=Lq,
            jobs_service_class=Ls,
            p_wait=float(share @ pw),
            p_wait_class=pw,
            throughput=float(rate.sum()),
            truncation_mass=float(1.0 - p @ adm),
            n_states=self.n_states,
            queue_probs=np.bincount(self.n_wait.sum(1).astype(int), weights=pi),
            chain=self,
        )

    # -- tagged-job waiting times -------------------------------------------------------------
    def _tagged(self, k):
        """Sub-generator of the arrival-free chain on the states where class ``k`` waits, and
        the (sub-stochastic) law of the state a tagged admitted class-``k`` arrival sees."""
        if k not in self._tagged_cache:
            self._tagged_cache[k] = self._tagged_build(k)
        return self._tagged_cache[k]

    def _tagged_build(self, k):
        idx = np.nonzero(self.waits[:, k])[0]
        out = np.asarray(self.Q_svc.sum(axis=1)).ravel()
        Qk = self.Q_svc[idx][:, idx] - sp.diags(out[idx])
        adm = self.admitted[:, k]
        v = self.pi[idx] * adm[idx] / float(self.pi @ adm)
        return Qk.tocsr(), v

    def wait_tail(self, t, method: str = "uniformization", classes=None):
        t = np.atleast_1d(np.asarray(t, float))
        if np.any(t < 0):
            raise ValueError("t must be >= 0")
        K = self.model.K
        per = np.zeros((len(t), K))
        for k in range(K) if classes is None else classes:
            Qk, v = self._tagged(k)
            if len(v) == 0:
                continue
            if method == "uniformization":
                per[:, k] = _uniformized_tail(Qk, v, t)
            elif method == "expm":
                for n, tt in enumerate(t):
                    per[n, k] = spla.expm_multiply(Qk.T.tocsc() * tt, v).sum()
            else:
                raise ValueError(f"unknown method {method!r}")
        return per @ self._share(), per

    def _share(self) -> np.ndarray:
        """Class mix of the admitted jobs."""
        r = np.array(self.model.probs) * (self.pi @ self.admitted)
        return r / r.sum()

    def wait_mean_tagged(self) -> np.ndarray:
        """Per class ``E[W_k] = v (-Q_k)^{-1} 1``: the tagged-job mean (Little's law check)."""
        out = np.zeros(self.model.K)
        for k in range(self.model.K):
            Qk, v = self._tagged(k)
            if len(v):
                out[k] = v @ spla.spsolve((-Qk).tocsc(), np.ones(len(v)))
        return out

    def wait_quantile(self, q: float, klass: int | None = None, *, rtol: float = 1e-12) -> float:
        if not 0 < q < 1:
            raise ValueError("q must be in (0, 1)")

        def tail(x):
            if klass is None:
                return self.wait_tail([x])[0][0]
            return self.wait_tail([x], classes=[klass])[1][0, klass]

        if tail(0.0) <= 1 - q:
            return 0.0
        lo, hi = 0.0, 1.0
        while tail(hi) > 1 - q:
            lo, hi = hi, 2 * hi
        while hi - lo > rtol * hi:
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if tail(mid) > 1 - q else (lo, mid)
        return 0.5 * (lo + hi)


def _uniformized_tail(Qk, v, t) -> np.ndarray:
    """``v exp(Q t) 1`` for each ``t`` by uniformisation (Poisson weights, error < 1e-15)."""
    rate = float((-Qk.diagonal()).max()) * 1.02 + 1e-300
    P = (sp.eye(Qk.shape[0]) + Qk / rate).T.tocsr()
    out = np.zeros(len(t))
    order = np.argsort(t)
    x = v.copy()
    n_done = 0
    terms = [x.sum()]  # v P^n 1, n = 0, 1, ...
    for i in order:
        lt = rate * t[i]
        n_max = int(lt + 10 * math.sqrt(lt) + 40)
        while n_done < n_max:
            x = P @ x
            n_done += 1
            terms.append(x.sum())
        n = np.arange(n_max + 1)
        if lt == 0:
            w = (n == 0).astype(float)
        else:
            w = np.exp(n * math.log(lt) - lt - np.array([math.lgamma(k + 1) for k in n]))
        out[i] = float(w @ np.array(terms[: n_max + 1]))
    return out


def _stationary_irreducible(Q) -> np.ndarray:
    """``pi Q = 0``, ``pi 1 = 1`` for an irreducible generator (off-diagonal part given),
    state 0 first: ``pi_0 = 1`` fixed, the other balance equations by sparse LU."""
    Q = sp.csr_matrix(Q)
    Q = Q - sp.diags(Q.diagonal())
    Q = (Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel())).tocsr()
    n = Q.shape[0]
    if n == 1:
        return np.ones(1)
    B = Q.T.tocsr()
    A = B[1:, 1:].tocsc()
    b = -B[1:, 0].toarray().ravel()
    x = spla.splu(A).solve(b)
    pi = np.concatenate([[1.0], x])
    pi /= pi.sum()
    resid = np.abs(Q.T @ pi).max() / np.abs(Q.diagonal()).max()
    if not (pi.min() > -1e-13 and resid < 1e-12):
        raise AssertionError(f"stationary solve inaccurate: min {pi.min():.3g}, resid {resid:.3g}")
    return np.clip(pi, 0.0, None)


def build(
    s,
    cores,
    probs,
    alphas,
    Ts,
    lam,
    *,
    max_jobs=None,
    min_weight=0.0,
    theta=1.0,
    tol=1e-10,
    max_states=300_000,
) -> PHChain:
    """The explicit chain, cut in one of two ways.

    ``max_jobs`` given: arrivals are blocked at ``max_jobs`` jobs in system, and when they
    would make a queue string ``c`` of weight ``prod_l theta probs[c_l] < min_weight``
    (``theta`` ~ the decay rate of ``P(q jobs waiting)``, so the rarest strings go first).
    ``max_jobs=None``: ``theta`` is read off a first small chain, then ``min_weight`` is lowered
    until the truncation mass is below ``tol`` (``RuntimeError`` past ``max_states`` states).
    """
    args = (s, cores, probs, alphas, Ts, lam)
    if max_jobs is not None:
        return PHChain(
            *args, max_jobs=max_jobs, min_weight=min_weight, theta=theta, max_states=max_states
        )
    K = len(cores)
    q0 = 30 if K == 1 else max(3, int(math.log(400) / math.log(K)))
    ch = PHChain(*args, max_jobs=int(s) + q0, max_states=max_states)
    mass = float(1.0 - np.array(ch.model.probs) @ (ch.pi @ ch.admitted))
    if mass < tol:
        return ch
    qp = np.bincount(ch.n_wait.sum(1).astype(int), weights=ch.pi)
    theta = float(np.clip(qp[-2] / qp[-3], 0.01, 0.98)) if len(qp) > 3 and qp[-3] > 0 else 0.5
    eps = 0.1 * tol
    while True:
        ch = PHChain(*args, max_jobs=10**6, min_weight=eps, theta=theta, max_states=max_states)
        mass = float(1.0 - np.array(ch.model.probs) @ (ch.pi @ ch.admitted))
        if mass < tol:
            return ch
        eps *= 0.3 * max(tol / mass, 1e-3)


def solve(s, cores, probs, alphas, Ts, lam, **cut) -> PHResult:
    """Stationary metrics of the truncated explicit chain (``cut``: see :func:`build`)."""
    return build(s, cores, probs, alphas, Ts, lam, **cut).result()


def wait_tail(s, cores, probs, alphas, Ts, lam, t, *, method="uniformization", **cut):
    """``(P(W > t), P(W_k > t))``: overall ``(n_t,)`` and per class ``(n_t, K)``."""
    return build(s, cores, probs, alphas, Ts, lam, **cut).wait_tail(t, method)


def wait_quantile(s, cores, probs, alphas, Ts, lam, q, *, klass=None, **cut) -> float:
    """Smallest ``t`` with ``P(W <= t) >= q``, overall (``klass=None``) or of one class."""
    return build(s, cores, probs, alphas, Ts, lam, **cut).wait_quantile(q, klass)


# ---------------------------------------------------------------------------------------------
# The saturated chain
# ---------------------------------------------------------------------------------------------


def lambda_c(s, cores, probs, alphas, Ts) -> float:
    """Departure rate of the saturated FCFS system (infinite backlog of i.i.d. classes)."""
    m = _Model(s, cores, probs, alphas, Ts)

    def refill(serving) -> dict:
        """Law of ``(serving, head)``: draw heads i.i.d. and start them while they fit."""
        out: dict = {}
        stack = [(serving, 1.0)]
        while stack:
            sv, p = stack.pop()
            for k in range(m.K):
                pk = p * m.probs[k]
                if m.used(sv) + m.cores[k] <= m.s:
                    for sv2, pa in m.start(sv, k):
                        stack.append((sv2, pk * pa))
                else:
                    out[(sv, k)] = out.get((sv, k), 0.0) + pk
        return out

    def after_departure(serving, head) -> dict:
        if m.used(serving) + m.cores[head] > m.s:
            return {(serving, head): 1.0}
        out: dict = {}
        for sv2, pa in m.start(serving, head):
            for key, p in refill(sv2).items():
                out[key] = out.get(key, 0.0) + pa * p
        return out

    index: dict = {}
    states: list = []
    todo: deque = deque()
    rows, cols, rates = [], [], []

    def visit(key):
        j = index.get(key)
        if j is None:
            j = index[key] = len(states)
            states.append(key)
            todo.append(key)
        return j

    for key in refill(()):
        visit(key)
    while todo:
        key = todo.popleft()
        i = index[key]
        serving, head = key
        for rate, sv2, departed in m.service_moves(serving):
            targets = after_departure(sv2, head) if departed else {(sv2, head): 1.0}
            for key2, p in targets.items():
                j = visit(key2)
                if j != i:
                    rows.append(i)
                    cols.append(j)
                    rates.append(rate * p)
    n = len(states)
    Q = sp.csr_matrix((rates, (rows, cols)), shape=(n, n))
    n_comp, label = csgraph.connected_components(Q, directed=True, connection="strong")
    coo = Q.tocoo()
    leaves = np.zeros(n_comp, bool)
    np.logical_or.at(leaves, label[coo.row], label[coo.row] != label[coo.col])
    closed = np.nonzero(~leaves)[0]
    if len(closed) != 1:
        raise AssertionError(f"saturated chain has {len(closed)} closed classes")
    keep = np.nonzero(label == closed[0])[0]
    pi = _stationary_irreducible(Q[keep][:, keep])
    dep = np.array([sum(m.exits[k][j] for k, j in states[i][0]) for i in keep], dtype=float)
    return float(pi @ dep)


# ---------------------------------------------------------------------------------------------
# Sampling, for the event simulator
# ---------------------------------------------------------------------------------------------


def ph_sampler(alpha, T):
    """``f(rng, size)``: i.i.d. draws of ``PH(alpha, T)`` by running the phase process."""
    alpha = np.asarray(alpha, float)
    T = np.atleast_2d(np.asarray(T, float))
    m = len(alpha)
    out_rate = -np.diag(T)
    # jump law from each phase: to phases 0..m-1, or to m = absorption
    jump = np.hstack([T - np.diag(np.diag(T)), -T.sum(axis=1, keepdims=True)]) / out_rate[:, None]
    cum = np.cumsum(jump, axis=1)
    cum[:, -1] = 1.0

    def f(rng, size):
        phase = rng.choice(m, size=size, p=alpha / alpha.sum())
        total = np.zeros(size)
        live = np.arange(size)
        while len(live):
            ph = phase[live]
            total[live] += rng.exponential(1.0 / out_rate[ph])
            nxt = (rng.random(len(live))[:, None] > cum[ph]).sum(axis=1)
            phase[live] = nxt
            live = live[nxt < m]
        return total

    return f


# ---------------------------------------------------------------------------------------------
# Reference values of small phase-type systems
# ---------------------------------------------------------------------------------------------


def _system(s, cores, probs, laws, lam, fine, coarse):
    return {
        "s": s,
        "cores": cores,
        "probs": probs,
        "alphas": [a for a, _ in laws],
        "Ts": [T for _, T in laws],
        "lam": lam,
        "cut": fine,  # the cut of the tabulated values
        "coarse_cut": coarse,  # a coarser one: the spread between the two bounds the cut error
    }


REFERENCE_SYSTEMS = {
    "s2-erlang2-exp": _system(
        2,
        [1, 2],
        [0.7, 0.3],
        [erlang(2, 1.0), exponential(1.5)],
        0.1,
        {"max_jobs": 12},
        {"max_jobs": 10},
    ),
    "s3-h2-erlang3": _system(
        3,
        [1, 3],
        [0.8, 0.2],
        [hyperexp([0.3, 0.7], [2.5, 0.5]), erlang(3, 2.0)],
        0.1,
        {"max_jobs": 13},
        {"max_jobs": 11},
    ),
    "s4-three-class": _system(
        4,
        [1, 2, 4],
        [0.6, 0.3, 0.1],
        [erlang(2, 1.0), exponential(1.5), coxian([2.0, 1.0], [0.5])],
        0.08,
        {"max_jobs": 10**6, "min_weight": 1e-10, "theta": 0.15},
        {"max_jobs": 10**6, "min_weight": 1e-9, "theta": 0.15},
    ),
    "s6-rare-big": _system(
        6,
        [1, 6],
        [0.9, 0.1],
        [erlang(2, 1.0), hyperexp([0.4, 0.6], [3.0, 1.0])],
        0.1,
        {"max_jobs": 13},
        {"max_jobs": 11},
    ),
    "s5-coxian3-erlang2": _system(
        5,
        [2, 3],
        [0.6, 0.4],
        [coxian([3.0, 2.0, 1.5], [0.6, 0.5]), erlang(2, 1.0)],
        0.3,
        {"max_jobs": 13},
        {"max_jobs": 11},
    ),
}
# From reference_values(name) (and name, "coarse_cut" for the spread); recomputed by the slow
# tests of tests/mjqm/test_reference_ph_ctmc.py.
REFERENCE_VALUES = {
    "s2-erlang2-exp": {
        "lambda_c": 1.1278725504018046,
        "wait_mean": 0.0921616797224,
        "wait_mean_class": [0.0760351580219, 0.129790230357],
        "response_mean_class": [1.07603515802, 1.62979023036],
        "jobs_mean": 0.12421616797,
        "jobs_mean_class": [0.0753224610605, 0.04889370691],
        "p_wait": 0.0681276932284,
        "p_wait_class": [0.0491097439646, 0.112502908177],
        "wait_tail": [0.0463441438527, 0.0149784350186],
        "wait_tail_class": [[0.0351713026636, 0.0724141066271], [0.0134914499669, 0.0184480668057]],
        "wait_quantile": 2.58772053811,
        "wait_quantile_class": [2.47417026025, 2.78947519128],
        "truncation_mass": 1.41e-11,
        "n_states": 14333,
        "coarse_spread": 9.79e-08,
        "error_estimate": 1.8e-09,
    },
    "s3-h2-erlang3": {
        "lambda_c": 1.1195978461014746,
        "wait_mean": 0.102049031972,
        "wait_mean_class": [0.0701939489506, 0.229469364058],
        "response_mean_class": [1.17019394895, 2.22946936406],
        "jobs_mean": 0.138204903187,
        "jobs_mean_class": [0.0936155159089, 0.0445893872777],
        "p_wait": 0.0594870919153,
        "p_wait_class": [0.0433002564505, 0.124234433774],
        "wait_tail": [0.0449429138095, 0.017767140609],
        "wait_tail_class": [[0.033712493604, 0.0898645946313], [0.0123724993746, 0.0393457055467]],
        "wait_quantile": 2.91188805503,
        "wait_quantile_class": [2.28635316802, 4.92544896255],
        "truncation_mass": 7.68e-11,
        "n_states": 47098,
        "coarse_spread": 3.15e-07,
        "error_estimate": 1.3e-08,
    },
    "s4-three-class": {
        "lambda_c": 1.7660144422255093,
        "wait_mean": 0.0191610551299,
        "wait_mean_class": [0.0101337377151, 0.0110028606808, 0.0977995430979],
        "response_mean_class": [1.01013373772, 1.51100286068, 1.0977995431],
        "jobs_mean": 0.0935328843143,
        "jobs_mean_class": [0.0484864193793, 0.0362640686121, 0.00878239632293],
        "p_wait": 0.0177853951472,
        "p_wait_class": [0.00938517961712, 0.0109856085139, 0.0885860483465],
        "wait_tail": [0.0111019189058, 0.00268215653352],
        "wait_tail_class": [
            [0.00586717809491, 0.00652697400222, 0.0562351985569],
            [0.0014631086369, 0.00149438891924, 0.0135597467741],
        ],
        "wait_quantile": 0.607818436566,
        "wait_quantile_class": [0, 0.0903714892241, 2.35659761654],
        "truncation_mass": 9.99e-10,
        "n_states": 45465,
        "coarse_spread": 7.31e-06,
        "error_estimate": 1.2e-06,
    },
    "s6-rare-big": {
        "lambda_c": 2.3822258862140377,
        "wait_mean": 0.0514778670994,
        "wait_mean_class": [0.0446016913484, 0.113363448858],
        "response_mean_class": [1.04460169135, 1.91336344886],
        "jobs_mean": 0.113147786674,
        "jobs_mean_class": [0.0940141521914, 0.0191336344825],
        "p_wait": 0.027210658935,
        "p_wait_class": [0.0186877660087, 0.103916695272],
        "wait_tail": [0.0193551775267, 0.00797607379236],
        "wait_tail_class": [
            [0.0144962291513, 0.0630857129057],
            [0.00741248727965, 0.0130483524067],
        ],
        "wait_quantile": 1.55950167587,
        "wait_quantile_class": [1.29581861992, 2.32668232149],
        "truncation_mass": 3.18e-10,
        "n_states": 40696,
        "coarse_spread": 9.61e-07,
        "error_estimate": 5.2e-08,
    },
    "s5-coxian3-erlang2": {
        "lambda_c": 1.8805224839122356,
        "wait_mean": 0.0558072498869,
        "wait_mean_class": [0.0212707535103, 0.107611994452],
        "response_mean_class": [0.854604086844, 1.10761199445],
        "jobs_mean": 0.286742174949,
        "jobs_mean_class": [0.153828735623, 0.132913439326],
        "p_wait": 0.0739918099461,
        "p_wait_class": [0.036723985723, 0.129893546281],
        "wait_tail": [0.0392636795995, 0.00480667514321],
        "wait_tail_class": [
            [0.0153958233943, 0.0750654639073],
            [0.00120159619703, 0.0102142935625],
        ],
        "wait_quantile": 1.48575105801,
        "wait_quantile_class": [0.744456391893, 2.01514549997],
        "truncation_mass": 5.9e-11,
        "n_states": 57336,
        "coarse_spread": 1.94e-06,
        "error_estimate": 5.7e-08,
    },
}

REFERENCE_TIMES = (0.5, 2.0)  # the t of the tabulated P(W > t)
REFERENCE_QUANTILE = 0.99


def reference_values(name: str, cut: str = "cut") -> dict:
    """Compute the tabulated metrics of ``REFERENCE_SYSTEMS[name]`` (``cut="coarse_cut"``: with
    the coarser cut)."""
    sysd = REFERENCE_SYSTEMS[name]
    args = [sysd[k] for k in ("s", "cores", "probs", "alphas", "Ts")]
    r = solve(*args, sysd["lam"], **sysd[cut])
    tail, per = r.wait_tail(REFERENCE_TIMES)
    K = len(sysd["cores"])
    return {
        "lambda_c": lambda_c(*args),
        "wait_mean": r.wait_mean,
        "wait_mean_class": r.wait_mean_class.tolist(),
        "response_mean_class": r.response_mean_class.tolist(),
        "jobs_mean": r.jobs_mean,
        "jobs_mean_class": r.jobs_mean_class.tolist(),
        "p_wait": r.p_wait,
        "p_wait_class": r.p_wait_class.tolist(),
        "wait_tail": tail.tolist(),
        "wait_tail_class": per.tolist(),
        "wait_quantile": r.wait_quantile(REFERENCE_QUANTILE),
        "wait_quantile_class": [r.wait_quantile(REFERENCE_QUANTILE, k) for k in range(K)],
        "truncation_mass": r.truncation_mass,
        "n_states": r.n_states,
    }
