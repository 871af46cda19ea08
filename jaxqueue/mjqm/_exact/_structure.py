"""The index maps of the exponential QBD (``docs/concepts/exact.md``): phases per level, the
departure-and-cascade transitions between global phases and the arrivals, built once per
``(s, cores)`` in numpy; no rate is part of them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from .._workload import Workload


def _count_by_used(s: int, cores: tuple[int, ...]) -> list[int]:
    """``c[u]`` = number of service vectors ``n`` with ``a . n = u`` (exact Python ints)."""
    c = [1] + [0] * s
    for a in cores:
        for u in range(a, s + 1):
            c[u] += c[u - a]
    return c


def qbd_size(workload: Workload) -> dict:
    """Sizes of the exponential QBD of ``workload`` before anything is built: ``phases``
    (head phases, the repeating block), ``service_vectors``, ``levels`` (boundary levels
    ``N*``), ``bytes`` (peak memory estimate in float64) and ``seconds`` (:func:`qbd_seconds`).
    With phase-type services a service vector counts the jobs per (class, phase)."""
    s, cores = _shape(workload)
    c = _count_by_used(s, _type_cores(workload, cores))
    phases = sum(sum(c[max(0, s - a + 1) :]) for a in cores)
    vectors = sum(c)
    levels = s // min(cores) + 1
    glob = phases + vectors + 1
    p = phases + vectors
    return {
        "phases": phases,
        "service_vectors": vectors,
        "levels": levels,
        "bytes": 8 * (2 * glob**2 + 24 * p**2),
        "seconds": qbd_seconds(levels, p),
    }


def qbd_seconds(levels: int, p: int) -> float:
    """A rough CPU time (seconds, compilation apart) of a dense QBD solve whose largest level
    has ``p`` phases: an LU and a few ``p x p`` products per boundary level and about 30 for the
    tail matrix (cyclic reduction); fitted to exponential and phase-type solves of 842-1,724
    phases per level on a 2-core CPU, within a factor 2.5 of each."""
    return 1.5e-10 * (levels + 30) * p**3


def _type_cores(workload: Workload, cores: tuple[int, ...]) -> tuple[int, ...]:
    """The cores of every (class, phase) pair: one phase for a law without a phase form."""
    out: list[int] = []
    for a, law in zip(cores, workload.services, strict=True):
        try:
            n = int(np.shape(law.phase_form()[0])[0])
        except ValueError:
            n = 1
        out += [a] * n
    return tuple(out)


def _shape(workload: Workload) -> tuple[int, tuple[int, ...]]:
    if workload.n_types != 1 or workload.specific is not None:
        raise ValueError(
            "exact: one pool of identical servers only (no resource vectors, no specific "
            "servers); use `mjqm simulate` or `mjqm sample`"
        )
    return workload.servers[0], tuple(int(r[0]) for r in workload.cores)


@dataclass(frozen=True)
class _Phases:
    """The phases of a QBD structure: the ``nv`` service vectors ``nvec`` (jobs in service per
    class or type) and the ``nh`` head phases ``(nvec[head_n], head_h)``, sorted by ``|n|``."""

    nvec: np.ndarray  # (nv, K)
    head_n: np.ndarray  # (nh,) index into nvec
    head_h: np.ndarray  # (nh,) class of the head

    @property
    def nh(self) -> int:
        return len(self.head_n)

    @property
    def nv(self) -> int:
        return len(self.nvec)


@dataclass(frozen=True)
class _Structure(_Phases):
    """Index maps of the QBD of one ``(s, cores)``: no numbers, only who goes where.

    Global phases: ``0 .. nh-1`` the head phases sorted by ``|n|``, ``nh .. nh+nv-1`` the none
    phases (one per service vector), ``nh + nv`` an inert padding phase.
    """

    s: int
    cores: np.ndarray  # (K,)
    n_star: int  # first level holding exactly the head phases
    n_global: int  # nh + nv + 1
    # down transitions: src, dst (global), departing class j, coef (multinomial * n_j), expo (T, K)
    d_src: np.ndarray
    d_dst: np.ndarray
    d_cls: np.ndarray
    d_coef: np.ndarray
    d_expo: np.ndarray
    # levels 0 .. n_star + 2: global index of each slot (padding -> n_global - 1)
    slots: np.ndarray  # (n_star + 3, P)
    # arrivals from level N (< n_star): target slot at level N + 1 and weight class per slot
    up_slot: np.ndarray  # (n_star, P, K)
    up_cls: np.ndarray  # (n_star, P, K): k -> p_k, K -> 1, K + 1 -> 0
    max_expo: int


def _service_vectors(s: int, a: np.ndarray) -> np.ndarray:
    rows: list[tuple[int, ...]] = []

    def rec(i: int, rem: int, cur: tuple[int, ...]) -> None:
        if i == len(a):
            rows.append(cur)
            return
        for k in range(rem // a[i] + 1):
            rec(i + 1, rem - k * int(a[i]), cur + (k,))

    rec(0, s, ())
    return np.asarray(rows, dtype=np.int64).reshape(len(rows), len(a))


def _log_multinomial(m: np.ndarray) -> np.ndarray:
    lg = np.vectorize(math.lgamma)
    return lg(m.sum(-1) + 1.0) - lg(m + 1.0).sum(-1)


def _indexer(s: int, a: np.ndarray, nvec: np.ndarray):
    """``index_of(vecs)``: the rows of ``nvec`` equal to the service vectors ``vecs``."""
    radix = np.asarray([s // int(x) + 1 for x in a], dtype=np.int64)
    stride = np.concatenate([[1], np.cumprod(radix[:-1])]).astype(np.int64)
    keys = nvec @ stride
    order = np.argsort(keys)
    sorted_keys = keys[order]
    return lambda vecs: order[np.searchsorted(sorted_keys, vecs @ stride)]


class _Space:
    """What a structure is built from: the service vectors of ``s`` servers for jobs of
    ``type_cores`` servers (``size`` jobs and ``used`` servers each, ``index_of`` their rows)
    and the head phases ``(n, h)``, a class-``h`` job (``cores[h]`` servers) that does not fit
    beside ``n``, sorted by ``|n|`` so that a level's heads are a prefix (``head_index[n, h]``
    their index, -1 where ``(n, h)`` is no head)."""

    def __init__(self, s: int, type_cores: np.ndarray, cores: np.ndarray):
        self.nvec = _service_vectors(s, type_cores)
        self.size, self.used = self.nvec.sum(1), self.nvec @ type_cores
        self.index_of = _indexer(s, type_cores, self.nvec)
        hn, hh = np.nonzero(self.used[:, None] + cores[None, :] > s)
        perm = np.lexsort((hh, hn, self.size[hn]))
        self.head_n, self.head_h = hn[perm], hh[perm]
        self.head_index = -np.ones((len(self.nvec), len(cores)), dtype=np.int64)
        self.head_index[self.head_n, self.head_h] = np.arange(len(self.head_n))

    def phases(self) -> dict:
        """The fields of :class:`_Phases`."""
        return {"nvec": self.nvec, "head_n": self.head_n, "head_h": self.head_h}


class _Transitions:
    """Down transitions collected as arrays: source, target (global phases), departing class,
    log coefficient and exponents of the class probabilities (``p^expo``)."""

    def __init__(self, K: int):
        self.K = K
        self.parts: list[tuple] = []

    def add(self, src, dst, j, logcoef, expo=None):
        expo = np.zeros((len(src), self.K), dtype=np.int64) if expo is None else expo
        self.parts.append((src, dst, np.full(len(src), j), logcoef, expo))

    def arrays(self):
        return [np.concatenate(x) for x in zip(*self.parts, strict=True)]


def _cascades(tr, s, a, nvec, used, logmult, index_of, head_index, none0, j, x_, base, lr_):
    """Head phases ``x_`` whose head entered after a class-``j`` departure (service vectors
    ``base``, log rates ``lr_``): the cascade admits a multiset ``m`` of revealed jobs and
    stops at a class ``k`` that does not fit, or empties the queue (a none phase)."""
    K = len(a)
    f = int(s - base[0] @ a)
    ms = np.nonzero(used <= f)[0]
    tgt_idx = index_of((base[:, None, :] + nvec[ms][None, :, :]).reshape(-1, K))
    tgt_idx = tgt_idx.reshape(len(x_), len(ms))
    lc = lr_[:, None] + logmult[ms][None, :]
    xx = np.broadcast_to(x_[:, None], tgt_idx.shape)
    # all revealed jobs fit and the queue is empty: none phase (valid iff |m| = b)
    expo = np.broadcast_to(nvec[ms][None], (len(x_), len(ms), K)).reshape(-1, K)
    tr.add(xx.ravel(), (none0 + tgt_idx).ravel(), j, lc.ravel(), expo)
    for k in range(K):
        stop = used[ms] + a[k] > f  # the next revealed job, of class k, does not fit
        if stop.any():
            ti = tgt_idx[:, stop]
            expo = np.broadcast_to(
                (nvec[ms][stop] + np.eye(K, dtype=np.int64)[k])[None], ti.shape + (K,)
            ).reshape(-1, K)
            tr.add(xx[:, stop].ravel(), head_index[ti.ravel(), k], j, lc[:, stop].ravel(), expo)


def _down(s, a, nvec, head_n, head_h, head_index, none0, index_of) -> _Transitions:
    """Every departure-and-cascade transition between global phases (module docstring)."""
    K = len(a)
    used = nvec @ a
    logmult = _log_multinomial(nvec.astype(float))
    tr = _Transitions(K)
    for j in range(K):  # none phase n: departure j -> none phase n - e_j
        rows = np.nonzero(nvec[:, j] > 0)[0]
        tgt = nvec[rows] - np.eye(K, dtype=np.int64)[j]
        tr.add(none0 + rows, none0 + index_of(tgt), j, np.log(nvec[rows, j].astype(float)))
    hv = nvec[head_n]
    for j in range(K):  # head phase x = (n, h): departure j
        xs = np.nonzero(hv[:, j] > 0)[0]
        n1 = hv[xs] - np.eye(K, dtype=np.int64)[j]
        lrate = np.log(hv[xs, j].astype(float))
        h = head_h[xs]
        fits = n1 @ a + a[h] <= s
        # the head still does not fit: phase (n - e_j, h), probability 1
        tr.add(xs[~fits], head_index[index_of(n1[~fits]), h[~fits]], j, lrate[~fits])
        # the head enters: cascades, grouped by the servers then free
        n2 = n1[fits] + np.eye(K, dtype=np.int64)[h[fits]]
        free = s - n2 @ a
        for f in np.unique(free):
            sel = free == f
            _cascades(
                tr,
                s,
                a,
                nvec,
                used,
                logmult,
                index_of,
                head_index,
                none0,
                j,
                xs[fits][sel],
                n2[sel],
                lrate[fits][sel],
            )
    return tr


def _level_slots(size, head_n, extra: int):
    """Levels ``0 .. N* + extra``: their global phases (heads with ``|n| <= N - 1``, then nones
    with ``|n| = N``; the nones start at ``nh``), and the ``(levels, P)`` slot table padded
    with the inert phase ``nh + nv``."""
    n_star = int(size.max()) + 1
    head_size = size[head_n]
    none0 = len(head_n)
    levels = [
        np.concatenate([np.nonzero(head_size <= N - 1)[0], none0 + np.nonzero(size == N)[0]])
        for N in range(n_star + 1 + extra)
    ]
    P = max(len(x) for x in levels)
    slots = np.full((len(levels), P), none0 + len(size), dtype=np.int64)
    for N, x in enumerate(levels):
        slots[N, : len(x)] = x
    return n_star, levels, slots


def _arrivals(s, a, nvec, head_index, nh, levels, n_star, P, index_of):
    """Arrivals, as (target slot one level up, weight class) per slot: a head phase stays
    (weight class ``K``: ``lam``), a none phase ``n`` reveals class ``k`` (weight ``p_k``):
    none ``n + e_k`` if it fits, else head ``(n, k)``; unused entries have weight class
    ``K + 1`` (zero)."""
    K = len(a)
    none0 = nh
    n_global = nh + len(nvec) + 1
    used = nvec @ a
    arrive = np.empty((len(nvec), K), dtype=np.int64)
    for k in range(K):
        fit = used + a[k] <= s
        arrive[fit, k] = none0 + index_of(nvec[fit] + np.eye(K, dtype=np.int64)[k])
        arrive[~fit, k] = head_index[np.nonzero(~fit)[0], k]
    up_slot = np.zeros((n_star, P, K), dtype=np.int64)
    up_cls = np.full((n_star, P, K), K + 1, dtype=np.int64)
    for N in range(n_star):
        slot_of = np.full(n_global, -1, dtype=np.int64)
        slot_of[levels[N + 1]] = np.arange(len(levels[N + 1]))
        x = levels[N]
        heads = np.nonzero(x < nh)[0]
        up_slot[N, heads, 0] = slot_of[x[heads]]
        up_cls[N, heads, 0] = K
        rows = np.nonzero(x >= nh)[0]
        up_slot[N, rows] = slot_of[arrive[x[rows] - none0]]
        up_cls[N, rows] = np.arange(K)[None, :]
    assert np.all(up_slot >= 0)
    return up_slot, up_cls


@functools.lru_cache(maxsize=32)
def _structure(s: int, cores: tuple[int, ...]) -> _Structure:
    """The index tables of the QBD for ``s`` servers and class sizes ``cores``: a pure function
    of its arguments, memoised by them (the 32 most recent; rates are not part of it)."""
    a = np.asarray(cores, dtype=np.int64)
    sp = _Space(s, a, a)
    nh = len(sp.head_n)
    n_global = nh + len(sp.nvec) + 1
    d_src, d_dst, d_cls, lcoef, d_expo = _down(
        s, a, sp.nvec, sp.head_n, sp.head_h, sp.head_index, nh, sp.index_of
    ).arrays()
    assert np.all(d_dst >= 0)
    n_star, levels, slots = _level_slots(sp.size, sp.head_n, 2)
    up_slot, up_cls = _arrivals(
        s, a, sp.nvec, sp.head_index, nh, levels, n_star, slots.shape[1], sp.index_of
    )
    return _Structure(
        s=s,
        cores=a,
        **sp.phases(),
        n_star=n_star,
        n_global=n_global,
        d_src=d_src.astype(np.int32),
        d_dst=d_dst.astype(np.int32),
        d_cls=d_cls.astype(np.int32),
        d_coef=np.exp(lcoef),
        d_expo=d_expo.astype(np.int32),
        slots=slots,
        up_slot=up_slot.astype(np.int32),
        up_cls=up_cls.astype(np.int32),
        max_expo=int(d_expo.max(initial=0)) + 1,
    )
