"""Independent brute-force reference: truncated CTMC of a multiserver-job queue under
several scheduling policies, over the ORDERED queue contents.

Written from the model's definition only; nothing from ``jaxqueue`` is read or imported.

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

Public API: :func:`ctmc_policy`, :func:`decide`, :func:`fcfs_saturated_throughput`.
"""

from __future__ import annotations

import math
import warnings
from collections import deque

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
