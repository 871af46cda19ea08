"""The index maps of the phase-type QBD (``docs/concepts/exact.md``, phase-type services).

A *type* is a pair (class ``i``, phase ``j`` of its law ``PH(alpha_i, T_i)``). A phase of the
chain is ``(n, h)``: ``n`` the jobs in service per type, ``h`` the class of the blocked head or
*none*. The rates between head phases are ``M = F + A C``, three sparse lists of index rows:

* ``F``: transitions without a cascade: a phase change ``t -> u`` (rate ``n_t T[t, u]``) and a
  completion after which the head still does not fit (rate ``n_t t_t``);
* ``A``: a completion after which the head starts in phase ``u`` (rate ``n_t t_t alpha_u``),
  to the service vector ``y`` it leaves (a row of ``nvec``);
* ``C``: the cascade from ``y``: admit the multiset ``m`` of revealed jobs (types with their
  entry phase, weight ``W[m] = prod (p_i alpha_t)^(m_t)`` times a multinomial) and stop at a
  class ``k`` that does not fit (weight ``p_k``); rows of ``C`` sum to one.

Built once per structure (servers, cores and the supports of ``alpha`` and ``T``) in numpy;
the numbers come later (:mod:`._ph`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ._structure import _count_by_used, _log_multinomial, _Phases, _Space


@dataclass(frozen=True)
class PHKey:
    """The structure of a phase-type workload: what the index maps depend on (hashable)."""

    s: int
    cores: tuple[int, ...]
    alpha: tuple[tuple[bool, ...], ...]  # support of alpha_i
    local: tuple[tuple[tuple[bool, ...], ...], ...]  # support of T_i off the diagonal
    exits: tuple[tuple[bool, ...], ...]  # support of t_i = -T_i 1

    @property
    def type_class(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.cores)), [len(a) for a in self.alpha])

    @property
    def type_cores(self) -> np.ndarray:
        return np.asarray(self.cores, dtype=np.int64)[self.type_class]

    @property
    def entry_types(self) -> np.ndarray:
        """Per type, whether a job may start in it (``alpha_t > 0``)."""
        return np.concatenate([np.asarray(x, bool) for x in self.alpha])

    @property
    def exit_types(self) -> np.ndarray:
        """Per type, whether a job may complete from it (``t_t > 0``)."""
        return np.concatenate([np.asarray(e, bool) for e in self.exits])


def ph_counts(key: PHKey) -> tuple[int, int]:
    """``(head phases, service vectors)`` of ``key`` without building anything."""
    c = _count_by_used(key.s, tuple(int(a) for a in key.type_cores))
    heads = sum(sum(c[max(0, key.s - a + 1) :]) for a in key.cores)
    return heads, sum(c)


@dataclass(frozen=True)
class PHStructure(_Phases):
    """Index maps of the saturated phase-type chain for one :class:`PHKey` (module docstring).

    ``f_*``: rows of ``F`` (``f_rate`` indexes the phase rates: exits per type, then the
    ``pairs``; ``f_down`` marks completions); ``a_*``: rows of ``A`` (``a_entry`` the entry
    type); ``c_*``: rows of ``C`` (``c_m`` a row of ``nvec``, ``c_stop`` the class).
    """

    key: PHKey
    pairs: np.ndarray  # (n_local, 2) types (t, u) with T[t, u] > 0 structurally
    f_src: np.ndarray
    f_dst: np.ndarray
    f_coef: np.ndarray
    f_rate: np.ndarray
    f_down: np.ndarray
    a_src: np.ndarray
    a_y: np.ndarray
    a_coef: np.ndarray
    a_rate: np.ndarray
    a_entry: np.ndarray
    c_y: np.ndarray
    c_dst: np.ndarray
    c_coef: np.ndarray
    c_m: np.ndarray
    c_stop: np.ndarray

    @property
    def n_transitions(self) -> int:
        return len(self.f_src) + len(self.a_src) + len(self.c_y)


def _cat(parts, dtype):
    if not parts:
        return np.zeros(0, dtype)
    return np.concatenate([np.ravel(x) for x in parts]).astype(dtype)


def _pairs(key: PHKey) -> np.ndarray:
    offset = np.concatenate([[0], np.cumsum([len(x) for x in key.alpha])])
    rows = [
        (offset[i] + u, offset[i] + v)
        for i, sup in enumerate(key.local)
        for u in range(len(sup))
        for v in range(len(sup))
        if u != v and sup[u][v]
    ]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


def _cascade_rows(key, nvec, used, index_of, head_index, reveal, ys):
    """Rows of ``C`` for the service vectors ``ys`` (grouped by their free servers)."""
    a_c = np.asarray(key.cores, dtype=np.int64)
    logmult = _log_multinomial(nvec.astype(float))
    out = {"y": [], "dst": [], "lc": [], "m": [], "stop": []}
    free = key.s - used[ys]
    for f in np.unique(free):
        y = ys[free == f]
        ms = reveal[used[reveal] <= f]
        tgt = index_of((nvec[y][:, None, :] + nvec[ms][None]).reshape(-1, nvec.shape[1]))
        tgt = tgt.reshape(len(y), len(ms))
        for k in range(len(a_c)):
            stop = used[ms] + a_c[k] > f
            if not stop.any():
                continue
            ti = tgt[:, stop]
            out["y"].append(np.broadcast_to(y[:, None], ti.shape))
            out["dst"].append(head_index[ti.ravel(), k])
            out["lc"].append(np.broadcast_to(logmult[ms][stop][None], ti.shape))
            out["m"].append(np.broadcast_to(ms[stop][None], ti.shape))
            out["stop"].append(np.full(ti.size, k))
    return out


@functools.lru_cache(maxsize=8)
def ph_structure(key: PHKey) -> PHStructure:
    """The index maps of the saturated chain of ``key`` (the repeating levels' phases, whose
    stationary departure rate is ``lambda_c``). Memoised by ``key`` (the 8 most recent)."""
    a_t = key.type_cores
    a_c = np.asarray(key.cores, dtype=np.int64)
    nt = len(a_t)
    eye = np.eye(nt, dtype=np.int64)
    sp = _Space(key.s, a_t, a_c)
    nvec, head_h, head_index, index_of = sp.nvec, sp.head_h, sp.head_index, sp.index_of
    alpha, exits = key.entry_types, key.exit_types
    reveal = np.nonzero((nvec[:, ~alpha] == 0).all(1))[0]
    pairs = _pairs(key)
    cls = key.type_class
    hv = nvec[sp.head_n]
    F = {"src": [], "dst": [], "lc": [], "rate": [], "down": []}
    A = {"src": [], "y": [], "lc": [], "rate": [], "entry": []}

    def add(d, **cols):
        n = np.size(cols["src"])
        for name, v in cols.items():
            d[name].append(np.broadcast_to(np.ravel(v), (n,)))

    for j in np.nonzero(exits)[0]:
        xs = np.nonzero(hv[:, j] > 0)[0]
        n1 = hv[xs] - eye[j]
        lr = np.log(hv[xs, j].astype(float))
        h = head_h[xs]
        fits = n1 @ a_t + a_c[h] <= key.s
        dst = head_index[index_of(n1[~fits]), h[~fits]]
        add(F, src=xs[~fits], dst=dst, lc=lr[~fits], rate=j, down=True)
        for t in np.nonzero(alpha)[0]:
            sel = fits & (h == cls[t])
            if sel.any():
                y = index_of(n1[sel] + eye[t])
                add(A, src=xs[sel], y=y, lc=lr[sel], rate=j, entry=t)
    for r, (t, u) in enumerate(pairs):
        xs = np.nonzero(hv[:, t] > 0)[0]
        dst = head_index[index_of(hv[xs] - eye[t] + eye[u]), head_h[xs]]
        add(F, src=xs, dst=dst, lc=np.log(hv[xs, t].astype(float)), rate=nt + r, down=False)
    ys = np.unique(np.concatenate(A["y"])) if A["y"] else np.zeros(0, dtype=np.int64)
    C = _cascade_rows(key, nvec, sp.used, index_of, head_index, reveal, ys)
    out = PHStructure(
        key=key,
        **sp.phases(),
        pairs=pairs,
        f_src=_cat(F["src"], np.int32),
        f_dst=_cat(F["dst"], np.int32),
        f_coef=np.exp(_cat(F["lc"], float)),
        f_rate=_cat(F["rate"], np.int32),
        f_down=_cat(F["down"], bool),
        a_src=_cat(A["src"], np.int32),
        a_y=_cat(A["y"], np.int32),
        a_coef=np.exp(_cat(A["lc"], float)),
        a_rate=_cat(A["rate"], np.int32),
        a_entry=_cat(A["entry"], np.int32),
        c_y=_cat(C["y"], np.int32),
        c_dst=_cat(C["dst"], np.int32),
        c_coef=np.exp(_cat(C["lc"], float)),
        c_m=_cat(C["m"], np.int32),
        c_stop=_cat(C["stop"], np.int32),
    )
    assert np.all(out.f_dst >= 0) and np.all(out.c_dst >= 0)
    return out
