"""The per-replication sums of the event engine: responses, waits, time integrals and the
waiting-time and response-time histograms (binned as the forward scan bins)."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import lax
from jaxtyping import Array

from ....stats import hist_bins
from ..._estimators import wait_histogram
from ..._workload import Workload
from ._deques import _onehot
from ._queues import cls_of, code_of, need_of


class _Acc(NamedTuple):
    """Per-replication sums: per class ``(K,)`` response, response^2, wait, wait^2, count;
    second-half response and count (drift check); time integrals of jobs, idle servers, idle
    servers while someone waits, and the window length; departures (saturated runs); the
    waiting-time and the response-time histograms, ``(K * n_bins,)`` counts each (class-major,
    :func:`_wait_bins`); a replay's log of first starts (``None`` otherwise:
    :func:`_record_start`)."""

    resp: Array
    resp2: Array
    wait: Array
    wait2: Array
    cnt: Array
    late_resp: Array
    late_cnt: Array
    area_jobs: Array
    area_idle: Array
    area_hol: Array
    time: Array
    done: Array
    hist: Array
    rhist: Array
    starts: Array | None = None  # replay: (4 * jobs, R) start, arrival, work, need
    logged: Array | None = None  # replay: the first starts logged so far, (R,)


def _scatter_count(hist, rows, where):
    """``hist`` ``(n, R)`` plus one at ``(rows[r], r)`` where ``where[r]`` (one scatter-add,
    int32 indices, those out of range dropped)."""
    R = rows.shape[0]
    idx = jnp.where(where, rows * R + jnp.arange(R, dtype=jnp.int32), hist.size)
    out = lax.scatter_add(
        hist.reshape(-1),
        idx[:, None],
        jnp.ones(R, hist.dtype),
        lax.ScatterDimensionNumbers((), (0,), (0,)),
        unique_indices=True,
        mode=lax.GatherScatterMode.FILL_OR_DROP,
    )
    return out.reshape(hist.shape)


def _record_departure(acc: _Acc, info, resp, on, bins) -> _Acc:
    """Add the response of a departing job where ``on`` and it is a measured one, to the sums
    and to its class's response-time histogram (``bins`` as in :func:`_record_wait`)."""
    c = code_of(info)
    dt = acc.resp.dtype
    measured = (c > 0) & on
    one = (_onehot(acc.resp.shape[0], cls_of(info)) & measured[None]).astype(dt)
    late = on & (c == 2)
    n_bins, shift, lo_code = bins
    row = hist_bins(resp, cls_of(info), lo_code=lo_code, n_bins=n_bins, shift=shift)
    return acc._replace(
        rhist=_scatter_count(acc.rhist, row, measured),
        resp=acc.resp + one * resp,
        resp2=acc.resp2 + one * (resp * resp),
        cnt=acc.cnt + one,
        late_resp=acc.late_resp + jnp.where(late, resp, 0),
        late_cnt=acc.late_cnt + late,
        done=acc.done + on,
    )


_BINS_PER_OCTAVE = 16  # waiting-time histogram resolution: the forward scan's default


def _wait_bins(workload: Workload):
    """The waiting-time histogram layout of the forward scan (``_estimators.wait_histogram``:
    bin 0 the atom at 0, then log-spaced bins from the float32 bits of the wait):
    ``(n_bins, shift, lo_code, edges)``."""
    return wait_histogram(workload, None, _BINS_PER_OCTAVE)


def _record_wait(acc: _Acc, info, wait, on, bins) -> _Acc:
    """Add the wait of a job starting for the first time where ``on`` and it is measured (at
    its start: every measured job starts before the run ends), to the sums and, if it waited,
    to its class's histogram (``bins``: ``(n_bins, shift, lo_code)``, binned as the forward
    scan bins; one scatter-add into the ``(K * n_bins, R)`` counts; bin 0, no wait, is the
    rest of the class's count: ``_result._summarise``)."""
    dt = acc.wait.dtype
    measured = (code_of(info) > 0) & on
    one = (_onehot(acc.wait.shape[0], cls_of(info)) & measured[None]).astype(dt)
    n_bins, shift, lo_code = bins
    row = hist_bins(wait, cls_of(info), lo_code=lo_code, n_bins=n_bins, shift=shift)
    return acc._replace(
        wait=acc.wait + one * wait,
        wait2=acc.wait2 + one * (wait * wait),
        hist=_scatter_count(acc.hist, row, measured & (wait > 0)),
    )


def _record_start(acc: _Acc, info, arr, wait, work, on) -> _Acc:
    """Log a first start where ``on`` (a replay only: ``acc.starts`` is not ``None``): start
    time, arrival time, work (``nan`` where the caller does not know it) and need, at row
    ``logged``, so that the replay can name each job's start (``_replay``)."""
    if acc.starts is None:
        return acc
    R = on.shape[0]
    L = acc.starts.shape[0] // 4
    dt = acc.starts.dtype
    row = jnp.where(on, acc.logged, L)  # beyond the log: dropped
    vals = jnp.stack([arr + wait, arr, work, need_of(info)]).astype(dt)  # (4, R)
    idx = (row[None] * 4 + jnp.arange(4, dtype=row.dtype)[:, None]) * R + jnp.arange(R)[None]
    flat = acc.starts.reshape(-1).at[idx.reshape(-1)].set(vals.reshape(-1), mode="drop")
    return acc._replace(starts=flat.reshape(acc.starts.shape), logged=acc.logged + on)


def _integrate(acc: _Acc, st, dt, inside, someone_waits) -> _Acc:
    """Time integrals over ``dt`` where ``inside`` the measuring window."""
    d = jnp.where(inside, dt, 0)
    idle = st.q.free.astype(dt.dtype)
    return acc._replace(
        area_jobs=acc.area_jobs + d * st.count,
        area_idle=acc.area_idle + d * idle,
        area_hol=acc.area_hol + d * idle * someone_waits,
        time=acc.time + d,
    )
