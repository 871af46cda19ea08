"""The index maps of the phase-type QBD over every level (``docs/concepts/exact.md``).

The exponential QBD of :mod:`._structure` (``mjsre`` Section 2) with *types* (class, phase) in
place of classes: a phase is ``(n, h)``, ``n`` the jobs in service per type and ``h`` the class
of the blocked head, or a *none* phase ``n``; level ``N`` holds the heads with ``|n| <= N - 1``
and the nones with ``|n| = N``; from ``N* = max |n| + 1`` on only the heads (the saturated chain
of :mod:`._ph_structure`). Waiting jobs carry no phase: one is drawn from ``alpha`` at the
start. Three lists of transitions between global phases, cut by the levels:

* down, a completion of type ``t`` (rate ``n_t t_t``): ``n -> n - e_t`` for a none phase; for a
  head phase the head stays blocked, or starts in phase ``u`` (``alpha_u``) and a cascade
  reveals a multiset ``m`` of types (``prod (p_i alpha_t)^(m_t)`` times a multinomial) and
  stops at a class ``k`` that does not fit (``p_k``) or empties the queue (a none phase): the
  level cut keeps exactly the outcomes with as many revealed jobs as were waiting;
* local, a phase change ``t -> u`` of a job in service (rate ``n_t T[t, u]``);
* up, an arrival: a head phase stays; a none phase reveals class ``k``, which starts in phase
  ``u`` if it fits (``p_k alpha_u``), else becomes the head (``p_k``).

A row's rate is ``coef * r[rate] * alpha[entry] * W[m] * p[stop]`` (:mod:`._ph_solve`), with
one extra entry equal to 1 at the end of ``r``, ``alpha`` and ``p``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ._ph_structure import PHKey, _pairs
from ._structure import _level_slots, _log_multinomial, _Phases, _Space

_COLUMNS = ("src", "dst", "coef", "rate", "entry", "m", "stop")


@dataclass(frozen=True)
class Rows:
    """Transitions between global phases: source, target and the factors of the rate."""

    src: np.ndarray
    dst: np.ndarray
    coef: np.ndarray
    rate: np.ndarray
    entry: np.ndarray
    m: np.ndarray
    stop: np.ndarray


class _Collect:
    def __init__(self, defaults: dict):
        self.defaults = defaults
        self.parts: dict[str, list] = {c: [] for c in _COLUMNS}

    def add(self, **cols) -> None:
        n = np.size(cols["src"])
        for c in _COLUMNS:
            v = cols[c] if c in cols else self.defaults[c]
            self.parts[c].append(np.broadcast_to(np.ravel(v), (n,)))

    def rows(self) -> Rows:
        dtypes = {"coef": float}
        return Rows(
            **{
                c: np.concatenate(v).astype(dtypes.get(c, np.int32))
                if v
                else np.zeros(0, dtypes.get(c, np.int32))
                for c, v in self.parts.items()
            }
        )


@dataclass(frozen=True)
class PHLevels(_Phases):
    """Index maps of the phase-type QBD of one :class:`PHKey` (module docstring). Global
    phases: the heads ``0 .. nh - 1`` sorted by ``|n|``, the nones ``nh .. nh + nv - 1``, an
    inert padding phase ``nh + nv``; ``slots[N]`` lists level ``N``'s (padded)."""

    key: PHKey
    n_star: int
    slots: np.ndarray  # (n_star + 1, P)
    n_pairs: int
    down: Rows
    local: Rows
    up: Rows

    @property
    def n_global(self) -> int:
        return self.nh + self.nv + 1

    @property
    def global_nvec(self) -> np.ndarray:
        """``(n_global, types)``: the service vector of every global phase (0 for padding)."""
        pad = np.zeros((1, self.nvec.shape[1]), dtype=np.int64)
        return np.concatenate([self.nvec[self.head_n], self.nvec, pad])


def ph_level_sizes(key: PHKey) -> list[int]:
    """The number of phases of levels ``0 .. N*`` without building anything (counts of the
    service vectors by servers used and jobs)."""
    s = key.s
    count = np.zeros((s + 1, s + 1), dtype=object)  # [used, jobs]
    count[0, 0] = 1
    for a in (int(x) for x in key.type_cores):
        for u in range(a, s + 1):
            count[u, 1:] += count[u - a, :-1]
    by_jobs = count.sum(0)
    heads = np.zeros(s + 1, dtype=object)
    for a in key.cores:
        heads += count[max(0, s - a + 1) :].sum(0)
    n_star = max(j for j in range(s + 1) if by_jobs[j]) + 1
    cum = np.cumsum(heads)
    return [
        int(by_jobs[N] if N <= s else 0) + int(cum[N - 1] if N else 0) for N in range(n_star + 1)
    ]


def _cascade(out, key, nvec, used, logmult, reveal, index_of, head_index, none0, **cols):
    """Down rows of the heads ``cols["src"]`` whose head started, leaving service vectors
    ``y``: admit the multiset ``m``, then a none phase or a stop at class ``k``."""
    a_c = np.asarray(key.cores, dtype=np.int64)
    y, src, coef = cols.pop("y"), cols.pop("src"), cols.pop("coef")
    free = key.s - y @ key.type_cores
    for f in np.unique(free):
        g = free == f
        ms = reveal[used[reveal] <= f]
        tgt = index_of((y[g][:, None, :] + nvec[ms][None]).reshape(-1, nvec.shape[1]))
        tgt = tgt.reshape(int(g.sum()), len(ms))
        c = coef[g][:, None] * np.exp(logmult[ms])[None]
        sb = np.broadcast_to(src[g][:, None], tgt.shape)
        mb = np.broadcast_to(ms[None], tgt.shape)
        out.add(src=sb, dst=none0 + tgt, coef=c, m=mb, **cols)
        for k in range(len(a_c)):
            stop = used[ms] + a_c[k] > f
            if stop.any():
                dst = head_index[tgt[:, stop], k]
                out.add(src=sb[:, stop], dst=dst, coef=c[:, stop], m=mb[:, stop], stop=k, **cols)


@functools.lru_cache(maxsize=8)
def ph_levels(key: PHKey) -> PHLevels:
    """The index maps of the phase-type QBD of ``key``; memoised by it (the 8 most recent)."""
    s, a_t = key.s, key.type_cores
    a_c = np.asarray(key.cores, dtype=np.int64)
    K, nt = len(a_c), len(a_t)
    eye = np.eye(nt, dtype=np.int64)
    sp = _Space(s, a_t, a_c)
    nvec, used, index_of, head_index = sp.nvec, sp.used, sp.index_of, sp.head_index
    head_h = sp.head_h
    nh = len(sp.head_n)
    none0 = nh
    alpha, exits = key.entry_types, key.exit_types
    pairs = _pairs(key)
    cls = key.type_class
    reveal = np.nonzero((nvec[:, ~alpha] == 0).all(1))[0]
    logmult = _log_multinomial(nvec.astype(float))
    one = nt + len(pairs)
    defaults = {"coef": 1.0, "rate": one, "entry": nt, "m": 0, "stop": K}
    down, local, up = (_Collect(defaults) for _ in range(3))
    hv = nvec[sp.head_n]
    for t in np.nonzero(exits)[0]:
        rows = np.nonzero(nvec[:, t] > 0)[0]
        dst = none0 + index_of(nvec[rows] - eye[t])
        down.add(src=none0 + rows, dst=dst, coef=nvec[rows, t], rate=t)
        xs = np.nonzero(hv[:, t] > 0)[0]
        n1, h, c = hv[xs] - eye[t], head_h[xs], hv[xs, t].astype(float)
        fits = n1 @ a_t + a_c[h] <= s
        dst = head_index[index_of(n1[~fits]), h[~fits]]
        down.add(src=xs[~fits], dst=dst, coef=c[~fits], rate=t)
        for u in np.nonzero(alpha)[0]:
            sel = fits & (h == cls[u])
            if sel.any():
                _cascade(
                    down, key, nvec, used, logmult, reveal, index_of, head_index, none0,
                    src=xs[sel], y=n1[sel] + eye[u], coef=c[sel], rate=t, entry=u,
                )  # fmt: skip
    for r, (t, u) in enumerate(pairs):
        xs = np.nonzero(hv[:, t] > 0)[0]
        dst = head_index[index_of(hv[xs] - eye[t] + eye[u]), head_h[xs]]
        local.add(src=xs, dst=dst, coef=hv[xs, t], rate=nt + r)
        rows = np.nonzero(nvec[:, t] > 0)[0]
        dst = none0 + index_of(nvec[rows] - eye[t] + eye[u])
        local.add(src=none0 + rows, dst=dst, coef=nvec[rows, t], rate=nt + r)
    up.add(src=np.arange(nh), dst=np.arange(nh))
    for k in range(K):
        fit = used + a_c[k] <= s
        rows = np.nonzero(fit)[0]
        for u in np.nonzero(alpha & (cls == k))[0]:
            up.add(src=none0 + rows, dst=none0 + index_of(nvec[rows] + eye[u]), entry=u, stop=k)
        rows = np.nonzero(~fit)[0]
        up.add(src=none0 + rows, dst=head_index[rows, k], stop=k)
    n_star, _, slots = _level_slots(sp.size, sp.head_n, 0)
    out = PHLevels(
        key=key,
        **sp.phases(),
        n_star=n_star,
        slots=slots,
        n_pairs=len(pairs),
        down=down.rows(),
        local=local.rows(),
        up=up.rows(),
    )
    assert all(np.all(r.dst >= 0) for r in (out.down, out.local, out.up))
    return out
