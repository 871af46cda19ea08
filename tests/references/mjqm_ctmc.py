"""Brute-force CTMCs of the multiserver-job queue (MJQM): the one CTMC reference of the model.

Written from the model's definition only (numpy and scipy.sparse); nothing from ``jaxqueue`` is
read or imported. Three chains of the one model, each for what it checks:

* :func:`ctmc_policy`: any policy (:func:`decide`, fcfs included) over the ordered job list,
  arrivals lost at ``max_jobs`` jobs: the reference of the event engine's policies;
* :func:`solve_mjqm`: FCFS with the jobs in service counted per class and the queue written
  out, cut adaptively until the truncation mass is below ``tol``: the precision the tests of
  ``jaxqueue.mjqm.exact`` ask for (the ordered job list grows too fast for it);
* :func:`fcfs_saturated_throughput`: FCFS with infinitely many jobs waiting; its throughput is
  the stability limit ``lambda_c``.

Policy chain
------------
Model: ``s`` identical servers; Poisson arrivals of rate ``lam``; an arriving job is of class
``k`` w.p. ``probs[k]``, holds ``cores[k]`` servers while in service (all at once) and has an
exponential requirement of rate ``mus[k]`` (preempt-resume; with exponential requirements a
job in service completes at rate ``mus[k]`` whatever happened before).  Jobs are kept in
arrival order; after every arrival and every completion the policy picks the set in service.
Arrivals that find ``max_jobs`` jobs in the system are lost.

Policies (see :func:`decide`):

* ``fcfs`` -- non-preemptive; waiting jobs start in arrival order while the earliest waiting
  job fits in the free servers (the first that does not fit blocks everyone behind it).
* ``first-fit`` -- non-preemptive; one scan of the waiting jobs in arrival order, starting each
  one that fits in the (decreasing) free servers.
* ``window:W`` -- non-preemptive; repeat until nothing changes: among the first ``W`` jobs of
  the current waiting list, start the earliest one that fits.
* ``preemptive-first-fit`` -- preemptive; from ``s`` free servers, scan all jobs in arrival
  order and serve each one that fits in what is left.
* ``msf`` -- preemptive; all jobs ordered by need, largest first (arrival order within a
  need), served first-fit in that order.
* ``least-servers-first`` -- preemptive; all jobs ordered by need, smallest first (arrival
  order within a need), served first-fit in that order.
* ``server-filling`` -- preemptive; take the shortest arrival-order prefix whose needs sum to
  at least ``s`` (or all jobs); serve the jobs of that prefix in order of need, largest first
  (arrival order within a need), each one that fits in what is left.

State: for the non-preemptive policies a tuple of codes ``2 * class + in_service``; for the
preemptive ones the tuple of classes (the set in service is a function of it).  States are
enumerated by BFS from the empty system, the generator is built with ``scipy.sparse`` and the
stationary law solved by a sparse LU (one balance equation replaced by the normalisation).

FCFS chain (``solve_mjqm``)
---------------------------
Model. The model above (class ``i``: probability ``p_i``, ``a_i`` servers, exponential time of
mean ``m_i = 1 / mu_i``) under strict FCFS: jobs enter service in arrival order, the head of the
queue enters as soon as ``a_i`` servers are free, and the jobs behind a blocked head wait even
when they would fit (head-of-line blocking).

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
import warnings
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

NONPREEMPTIVE = ("fcfs", "first-fit", "window")
PREEMPTIVE = ("preemptive-first-fit", "msf", "least-servers-first", "server-filling")
ALL_POLICIES = (
    "fcfs",
    "first-fit",
    "window:2",
    "preemptive-first-fit",
    "msf",
    "least-servers-first",
    "server-filling",
)


def parse_policy(policy: str) -> tuple[str, int]:
    """``"window:3"`` -> ``("window", 3)``; other names -> ``(name, 0)``."""
    policy = policy.strip().lower()
    if policy.startswith("window"):
        head, sep, tail = policy.partition(":")
        if head != "window" or not sep or not tail.strip().isdigit() or int(tail) < 1:
            raise ValueError(f"bad window policy {policy!r}: expected 'window:W' with W >= 1")
        return "window", int(tail)
    if policy in NONPREEMPTIVE or policy in PREEMPTIVE:
        return policy, 0
    raise ValueError(f"unknown policy {policy!r}")


# ---------------------------------------------------------------------------------------------
# Policy decisions
# ---------------------------------------------------------------------------------------------


def _settle_nonpreemptive(kind: str, W: int, s: int, cores, jobs: tuple) -> tuple:
    """Non-preemptive start rule on a tuple of codes ``2*class + flag``; returns the new tuple."""
    free = s
    for c in jobs:
        if c & 1:
            free -= cores[c >> 1]
    if free <= 0:
        return jobs
    out = list(jobs)
    if kind == "fcfs":
        for i, c in enumerate(out):
            if c & 1:
                continue
            need = cores[c >> 1]
            if need > free:
                break
            out[i] = c | 1
            free -= need
    elif kind == "first-fit":
        for i, c in enumerate(out):
            if c & 1:
                continue
            need = cores[c >> 1]
            if need <= free:
                out[i] = c | 1
                free -= need
                if free == 0:
                    break
    elif kind == "window":
        while True:
            started = False
            seen = 0
            for i, c in enumerate(out):
                if c & 1:
                    continue
                seen += 1
                if seen > W:
                    break
                need = cores[c >> 1]
                if need <= free:
                    out[i] = c | 1
                    free -= need
                    started = True
                    break
            if not started:
                break
    else:  # pragma: no cover - guarded by parse_policy
        raise ValueError(kind)
    return tuple(out)


def _serve_preemptive(kind: str, s: int, cores, classes: tuple) -> tuple:
    """Positions (indices into ``classes``) served by a preemptive policy."""
    n = len(classes)
    if kind == "preemptive-first-fit":
        order = range(n)
    elif kind == "msf":
        order = sorted(range(n), key=lambda i: (-cores[classes[i]], i))
    elif kind == "least-servers-first":
        order = sorted(range(n), key=lambda i: (cores[classes[i]], i))
    elif kind == "server-filling":
        total = 0
        m = n
        for i, k in enumerate(classes):
            total += cores[k]
            if total >= s:
                m = i + 1
                break
        order = sorted(range(m), key=lambda i: (-cores[classes[i]], i))
    else:  # pragma: no cover - guarded by parse_policy
        raise ValueError(kind)
    free = s
    served = []
    for i in order:
        need = cores[classes[i]]
        if need <= free:
            served.append(i)
            free -= need
            if free == 0:
                break
    return tuple(sorted(served))


def decide(policy: str, s: int, cores, jobs) -> tuple[bool, ...]:
    """In-service flags the policy gives to ``jobs`` (a sequence of ``(class, in_service)`` in
    arrival order).  Non-preemptive policies keep the jobs already in service and start waiting
    ones; preemptive policies ignore the incoming flags and decide from scratch."""
    kind, W = parse_policy(policy)
    jobs = [(int(k), bool(f)) for k, f in jobs]
    if kind in NONPREEMPTIVE:
        codes = tuple(2 * k + int(f) for k, f in jobs)
        return tuple(bool(c & 1) for c in _settle_nonpreemptive(kind, W, s, cores, codes))
    served = set(_serve_preemptive(kind, s, cores, tuple(k for k, _ in jobs)))
    return tuple(i in served for i in range(len(jobs)))


# ---------------------------------------------------------------------------------------------
# Stationary solve
# ---------------------------------------------------------------------------------------------


DIRECT_MAX_STATES = 12_000


def _stationary(rows, cols, rates, n: int, solver: str = "auto") -> np.ndarray:
    """Stationary law of the CTMC with off-diagonal rates ``rates[i]`` from ``rows[i]`` to
    ``cols[i]`` (one recurrent class, containing state 0): solve ``Q^T pi = 0`` with the
    balance equation of state 0 replaced by ``sum(pi) = 1``.

    ``solver="direct"``: sparse LU (exact up to round-off, but the fill-in of the ordered-queue
    chains grows fast: used by ``"auto"`` up to ``DIRECT_MAX_STATES`` states).
    ``solver="iterative"``: BiCGSTAB with a Jacobi preconditioner (then ILU-GMRES if that
    fails), to a relative residual of 1e-14.  Either way the full balance residual is checked.
    """
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    rates = np.asarray(rates, dtype=np.float64)
    out = np.bincount(rows, weights=rates, minlength=n)
    if n == 1:
        return np.ones(1)
    # A = Q^T: entry (target, source) = rate, diagonal = -outflow; row 0 -> all ones.
    a_r = np.concatenate([cols, np.arange(n)])
    a_c = np.concatenate([rows, np.arange(n)])
    a_v = np.concatenate([rates, -out])
    keep = a_r != 0
    a_r = np.concatenate([a_r[keep], np.zeros(n, dtype=np.int64)])
    a_c = np.concatenate([a_c[keep], np.arange(n)])
    a_v = np.concatenate([a_v[keep], np.ones(n)])
    b = np.zeros(n)
    b[0] = 1.0
    if solver == "auto":
        solver = "direct" if n <= DIRECT_MAX_STATES else "iterative"

    def residual(pi):
        flow = np.bincount(cols, weights=rates * pi[rows], minlength=n) - out * pi
        return np.abs(flow).max() / out.max()

    if solver == "direct":
        A = sp.csc_matrix((a_v, (a_r, a_c)), shape=(n, n))
        with warnings.catch_warnings():
            warnings.simplefilter("error", spla.MatrixRankWarning)
            pi = np.asarray(spla.spsolve(A, b, permc_spec="COLAMD"), dtype=np.float64)
    elif solver == "iterative":
        A = sp.csr_matrix((a_v, (a_r, a_c)), shape=(n, n))
        dg = A.diagonal()
        M = spla.LinearOperator((n, n), matvec=lambda v: v / dg, dtype=np.float64)
        pi, info = spla.bicgstab(A, b, M=M, rtol=1e-14, atol=0.0, maxiter=20_000)
        if info != 0 or not np.all(np.isfinite(pi)) or residual(pi) > 1e-12:
            Ac = A.tocsc()
            ilu = spla.spilu(Ac, drop_tol=1e-4, fill_factor=10)
            Mi = spla.LinearOperator((n, n), matvec=ilu.solve, dtype=np.float64)
            pi, info = spla.gmres(Ac, b, M=Mi, rtol=1e-14, atol=0.0, restart=60, maxiter=500)
    else:
        raise ValueError(f"unknown solver {solver!r}")
    if not np.all(np.isfinite(pi)):
        raise FloatingPointError("stationary solve failed")
    # Tiny negative round-off only; anything else is an error.
    if pi.min() < -1e-10:
        raise FloatingPointError(f"negative stationary mass {pi.min():.3e}")
    pi = np.clip(pi, 0.0, None)
    pi /= pi.sum()
    resid = residual(pi)
    if resid > 1e-10:
        raise FloatingPointError(f"stationary residual {resid:.3e} ({solver})")
    return pi


# ---------------------------------------------------------------------------------------------
# The CTMC
# ---------------------------------------------------------------------------------------------


def ctmc_policy(
    policy: str, s: int, cores, probs, mus, lam: float, max_jobs: int, *, solver: str = "auto"
) -> dict:
    """Exact stationary metrics of the truncated CTMC (see module docstring).

    Returns a dict with ``jobs_mean_class``, ``response_mean_class``, ``response_mean``,
    ``jobs_mean``, ``idle_servers_mean``, ``p_full``, ``states`` and, for the non-preemptive
    policies only, ``wait_mean_class`` and ``wait_mean`` (Little's law with
    ``lam_eff_k = lam * probs[k] * (1 - p_full)``).  Also ``lam_eff_class`` and ``lam_eff``.
    ``solver``: ``"auto"`` (sparse LU up to ``DIRECT_MAX_STATES`` states, else BiCGSTAB),
    ``"direct"`` or ``"iterative"``; see :func:`_stationary`.
    """
    kind, W = parse_policy(policy)
    s = int(s)
    cores = tuple(int(c) for c in cores)
    probs = tuple(float(p) for p in probs)
    mus = tuple(float(m) for m in mus)
    K = len(cores)
    if not (len(probs) == len(mus) == K):
        raise ValueError("cores, probs, mus must have the same length")
    if s < 1 or any(c < 1 or c > s for c in cores):
        raise ValueError("need 1 <= cores[k] <= s")
    if any(p < 0 for p in probs) or abs(sum(probs) - 1.0) > 1e-12:
        raise ValueError("probs must be a probability vector")
    if any(m <= 0 for m in mus) or lam <= 0 or max_jobs < 1:
        raise ValueError("need mus > 0, lam > 0, max_jobs >= 1")
    nonpre = kind in NONPREEMPTIVE
    arr = [(k, lam * probs[k]) for k in range(K) if probs[k] > 0]

    index: dict[tuple, int] = {(): 0}
    states: list[tuple] = [()]
    queue = deque([()])
    rows: list[int] = []
    cols: list[int] = []
    rates: list[float] = []
    # per-state features, filled in BFS order
    n_class: list[tuple] = []  # jobs per class
    q_class: list[tuple] = []  # jobs per class not in service
    busy: list[int] = []

    def target(t: tuple) -> int:
        j = index.get(t)
        if j is None:
            j = len(states)
            index[t] = j
            states.append(t)
            queue.append(t)
        return j

    settle = _settle_nonpreemptive
    serve = _serve_preemptive
    while queue:
        st = queue.popleft()
        i = index[st]
        n = len(st)
        cnt = [0] * K
        wq = [0] * K
        b = 0
        if nonpre:
            served = []
            for pos, c in enumerate(st):
                k = c >> 1
                cnt[k] += 1
                if c & 1:
                    b += cores[k]
                    served.append(pos)
                else:
                    wq[k] += 1
            if n < max_jobs:
                for k, r in arr:
                    rows.append(i)
                    cols.append(target(settle(kind, W, s, cores, st + (2 * k,))))
                    rates.append(r)
            for pos in served:
                rows.append(i)
                cols.append(target(settle(kind, W, s, cores, st[:pos] + st[pos + 1 :])))
                rates.append(mus[st[pos] >> 1])
        else:
            for k in st:
                cnt[k] += 1
            served = serve(kind, s, cores, st)
            wq = cnt[:]
            for pos in served:
                k = st[pos]
                b += cores[k]
                wq[k] -= 1
            if n < max_jobs:
                for k, r in arr:
                    rows.append(i)
                    cols.append(target(st + (k,)))
                    rates.append(r)
            for pos in served:
                rows.append(i)
                cols.append(target(st[:pos] + st[pos + 1 :]))
                rates.append(mus[st[pos]])
        n_class.append(tuple(cnt))
        q_class.append(tuple(wq))
        busy.append(b)
        assert b <= s

    nst = len(states)
    pi = _stationary(rows, cols, rates, nst, solver)
    n_class_a = np.asarray(n_class, dtype=np.float64).reshape(nst, K)
    q_class_a = np.asarray(q_class, dtype=np.float64).reshape(nst, K)
    busy_a = np.asarray(busy, dtype=np.float64)
    tot = n_class_a.sum(axis=1)
    p_full = float(pi[tot == max_jobs].sum())
    jobs_k = pi @ n_class_a
    lam_eff_k = np.array([lam * p * (1.0 - p_full) for p in probs])
    with np.errstate(divide="ignore", invalid="ignore"):
        resp_k = np.where(lam_eff_k > 0, jobs_k / np.where(lam_eff_k > 0, lam_eff_k, 1), np.nan)
    lam_eff = float(lam_eff_k.sum())
    res = {
        "policy": policy,
        "jobs_mean_class": jobs_k,
        "response_mean_class": resp_k,
        "response_mean": float(jobs_k.sum() / lam_eff),
        "jobs_mean": float(jobs_k.sum()),
        "idle_servers_mean": float(s - pi @ busy_a),
        "p_full": p_full,
        "states": nst,
        "lam_eff_class": lam_eff_k,
        "lam_eff": lam_eff,
    }
    if nonpre:
        wq_k = pi @ q_class_a
        with np.errstate(divide="ignore", invalid="ignore"):
            res["wait_mean_class"] = np.where(
                lam_eff_k > 0, wq_k / np.where(lam_eff_k > 0, lam_eff_k, 1), np.nan
            )
        res["wait_mean"] = float(wq_k.sum() / lam_eff)
    return res


# ---------------------------------------------------------------------------------------------
# FCFS saturated system (stability limit of fcfs)
# ---------------------------------------------------------------------------------------------


def fcfs_saturated_throughput(s: int, cores, probs, mus) -> float:
    """Throughput of the saturated FCFS system (infinitely many jobs waiting, classes i.i.d.
    ``probs``): fcfs is stable iff ``lam`` is below this value.  State: multiset of classes in
    service (sorted tuple) and the class of the blocked head-of-line job."""
    K = len(cores)
    cores = tuple(int(c) for c in cores)

    def fill(inserv: tuple, cand: int) -> dict:
        """Outcome law of starting ``cand`` then fresh i.i.d. draws until one does not fit."""
        free = s - sum(cores[k] for k in inserv)
        if cores[cand] > free:
            return {(inserv, cand): 1.0}
        nxt = tuple(sorted(inserv + (cand,)))
        out: dict = {}
        for k in range(K):
            if probs[k] > 0:
                for key, p in fill(nxt, k).items():
                    out[key] = out.get(key, 0.0) + probs[k] * p
        return out

    start: dict = {}
    for k in range(K):
        if probs[k] > 0:
            for key, p in fill((), k).items():
                start[key] = start.get(key, 0.0) + probs[k] * p
    index = {}
    order = []
    queue = deque(start)
    for key in start:
        index[key] = len(order)
        order.append(key)
    rows, cols, rates = [], [], []
    while queue:
        st = queue.popleft()
        i = index[st]
        inserv, hol = st
        for pos in range(len(inserv)):
            rest = inserv[:pos] + inserv[pos + 1 :]
            for key, p in fill(rest, hol).items():
                j = index.get(key)
                if j is None:
                    j = index[key] = len(order)
                    order.append(key)
                    queue.append(key)
                rows.append(i)
                cols.append(j)
                rates.append(mus[inserv[pos]] * p)
    n = len(order)
    # Self-loops are harmless for the balance equations but drop them for clarity.
    rows_a, cols_a, rates_a = np.asarray(rows), np.asarray(cols), np.asarray(rates)
    m = rows_a != cols_a
    # state 0 may be transient in principle; solve on the recurrent class reachable from it
    # via the generic solver after re-rooting at a state of the last-found (recurrent) part.
    if n == 1:
        pi = np.ones(1)
    else:
        pi = _stationary_any(rows_a[m], cols_a[m], rates_a[m], n)
    thr = np.array([sum(mus[k] for k in key[0]) for key in order])
    return float(pi @ thr)


def _stationary_any(rows, cols, rates, n):
    """Stationary law of a small chain that may have transient states (dense solve on the
    closed communicating class)."""
    Q = np.zeros((n, n))
    np.add.at(Q, (rows, cols), rates)
    Q -= np.diag(Q.sum(axis=1))
    # reachability closure to find a closed class
    R = (Q > 0) | np.eye(n, dtype=bool)
    for _ in range(int(math.ceil(math.log2(max(n, 2)))) + 1):
        R = R | ((R.astype(np.int64) @ R.astype(np.int64)) > 0)
    closed = [i for i in range(n) if all(R[j, i] for j in range(n) if R[i, j])]
    cls = np.array(closed)
    Qc = Q[np.ix_(cls, cls)]
    A = np.vstack([Qc.T, np.ones(len(cls))])
    b = np.zeros(len(cls) + 1)
    b[-1] = 1.0
    x = np.linalg.lstsq(A, b, rcond=None)[0]
    pi = np.zeros(n)
    pi[cls] = x
    return pi


# ---------------------------------------------------------------------------------------------
# FCFS, lumped: the jobs in service per class, the queue written out
# ---------------------------------------------------------------------------------------------


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


def _stationary_from_empty(Q: sp.csr_matrix) -> np.ndarray:
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
    pi = _stationary_from_empty(Q)

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
