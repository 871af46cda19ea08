"""The job lists of the event engine: the jobs in service in slots, the waiting ones in deques.

The engine does not keep every job in one arrival-ordered buffer (a departure would shift it,
and a policy would scan it at every event). Per replication it keeps

* the jobs in service in ``M = s // min(need)`` slots: absolute end time ``s_end`` (``inf``:
  empty), arrival time ``s_arr`` and a packed ``s_info`` (need 0: empty); unordered, or
  (``Layout.sorted_slots``) sorted by end time, then arrival time, the empty slots last;
* the waiting jobs in ``D`` ring-buffer deques of ``Q`` entries, each in arrival order: one
  FIFO, or one per distinct need (a preempted job goes back to the front of its need's
  deque: it is older than every waiting job of that need). The front of every deque is also
  kept in registers (``f_*``), or the first ``F`` entries of a single FIFO
  (``Layout.registers``), so a pick reads no deque memory;
* for a size-aware policy (``Layout.all_rows``), every job in a row, in arrival order;
* for a policy that serves only within a bounded arrival-order prefix (``Layout.rows``),
  that prefix in ``W`` unordered rows (``s_*``, in service or not, with the first wait
  ``s_wait`` and the place in the arrival order: ``s_before``, the needs of the jobs ahead,
  ``s_rank``, 1 + those of the same need ahead) and the rest in one FIFO.

All arrays carry the replications on their last axis. Times are relative to an epoch that the
engine moves to the clock every few rounds (float32 runs keep their digits); ``f_rem`` and the
deques hold remaining work. This module also holds the first completion over the slots
(``rows_first``); the other reductions over the slots are ``jaxqueue._jit``'s ``rows_*``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Float, Int

from ...._jit import settle

__all__ = [
    "Queues",
    "pack",
    "need_of",
    "cls_of",
    "code_of",
    "started_of",
    "rows_first",
]

_CLS_SHIFT, _CODE_SHIFT, _STARTED_SHIFT, _RUN_SHIFT, _MARK_SHIFT = 16, 26, 28, 29, 30


def pack(need, cls, code, started):
    """One int32 per job: need (bits 0-15), class (16-25), measuring code (26-27), started
    (28): one field to move instead of four."""
    return (
        need.astype(jnp.int32)
        | (cls.astype(jnp.int32) << _CLS_SHIFT)
        | (code.astype(jnp.int32) << _CODE_SHIFT)
        | (started.astype(jnp.int32) << _STARTED_SHIFT)
    )


def need_of(info):
    return info & 0xFFFF


def cls_of(info):
    return (info >> _CLS_SHIFT) & 0x3FF


def code_of(info):
    return (info >> _CODE_SHIFT) & 3


def started_of(info):
    return ((info >> _STARTED_SHIFT) & 1).astype(bool)


def set_started(info):
    return info | (1 << _STARTED_SHIFT)


def running_of(info):
    """In service (the prefix rows: bit 29 of the packed info)."""
    return ((info >> _RUN_SHIFT) & 1).astype(bool)


def with_running(info, run):
    return (info & ~(1 << _RUN_SHIFT)) | (run.astype(jnp.int32) << _RUN_SHIFT)


def mark_of(info):
    """The policy's bit of a job (``Jobs.mark``; every job in a row: bit 30)."""
    return ((info >> _MARK_SHIFT) & 1).astype(bool)


def with_mark(info, mark):
    return (info & ~(1 << _MARK_SHIFT)) | (mark.astype(jnp.int32) << _MARK_SHIFT)


def rows_first(keys, values, gather=True):
    """Per replication, the slot with the smallest ``keys`` (arrays over ``(slots, R)``,
    compared in order: lexicographic; the lowest slot on ties) and ``values`` at that slot:
    one tree of comparisons to the slot, materialised once (:func:`settle`; XLA fused the
    tree into each value fetched and computed it once per value), then a gather per value.
    ``gather=False``: the values carried through the tree instead (on the all-rows layout's
    few rows the gathers cost more than the tree saves)."""
    M, R = keys[0].shape
    ids = jnp.broadcast_to(jnp.arange(M, dtype=jnp.int32)[:, None], (M, R))
    carried = (*keys, ids) if gather else (*keys, ids, *values)
    rows = [tuple(lax.index_in_dim(x, i, 0, keepdims=False) for x in carried) for i in range(M)]
    nk = len(keys)

    def better(a, b):  # b strictly before a
        lt, eq = b[0] < a[0], b[0] == a[0]
        for x, y in zip(a[1:nk], b[1:nk], strict=True):
            lt, eq = lt | (eq & (y < x)), eq & (y == x)
        return tuple(jnp.where(lt, y, x) for x, y in zip(a, b, strict=True))

    while len(rows) > 1:
        pairs = [better(rows[i], rows[i + 1]) for i in range(0, len(rows) - 1, 2)]
        rows = pairs + rows[len(pairs) * 2 :]
    if not gather:
        j, *found = settle(*rows[0][nk:])
        return j, tuple(found)
    (j,) = settle(rows[0][nk])
    at = j * R + jnp.arange(R, dtype=jnp.int32)
    return j, tuple(x.reshape(-1).at[at].get(mode="promise_in_bounds") for x in values)


def encode(info, dtype):
    """The packed int32 as a float of the deque body (exact: the value in float64, the bits in
    float32)."""
    if jnp.dtype(dtype).itemsize == 8:
        return info.astype(dtype)
    return lax.bitcast_convert_type(info, dtype)


def decode(x):
    if x.dtype.itemsize == 8:
        return x.astype(jnp.int32)
    return lax.bitcast_convert_type(x, jnp.int32)


class Queues(NamedTuple):
    """The jobs of all replications (module docstring); ``body``: the deques,
    ``(D, Q, R, width)`` (arrival, remaining work, encoded info, and the estimate where kept,
    side by side: a front refill reads one cache line per replication) flattened; ``free``
    servers; ``busy``: jobs in service per per-need deque. With prefix rows (``Layout.rows``),
    ``s_*`` are those rows (``s_end``: the end time of a job in service, else its remaining
    work), with ``s_wait``, ``s_before``, ``s_rank`` (module docstring; else they have no
    rows); with every job in a row (``Layout.all_rows``), the rows in arrival order,
    ``s_size`` the sizes drawn at arrival (``s_before``, ``s_rank`` have no rows), ``memo``
    the state of a policy with ``memory`` and ``s_est`` the estimates of a policy that
    ``estimates`` (``Layout.estimate``). With the slots sorted by estimated end
    (``Layout.estimated``), ``s_est`` holds each job in service's estimate, ``s_start`` its
    start (start plus estimate is the sort key), and ``f_est`` and the body's fourth field
    the estimates of the waiting jobs."""

    s_end: Float[Array, "M R"]
    s_arr: Float[Array, "M R"]
    s_info: Int[Array, "M R"]
    f_arr: Float[Array, "D R"]
    f_rem: Float[Array, "D R"]
    f_info: Int[Array, "D R"]
    body: Float[Array, " DQ3R"]
    head: Int[Array, "D R"]
    size: Int[Array, "D R"]
    busy: Int[Array, "D R"]
    free: Int[Array, " R"]
    s_wait: Float[Array, "W R"]
    s_before: Int[Array, "W R"]
    s_rank: Int[Array, "W R"]
    s_size: Float[Array, "W R"] | None = None
    memo: Int[Array, " R"] | None = None
    s_est: Float[Array, "W R"] | None = None
    s_start: Float[Array, "M R"] | None = None
    f_est: Float[Array, "F R"] | None = None

    @property
    def all_rows(self) -> bool:
        """Every job in a row (``Layout.all_rows``, whose state alone keeps ``memo``): the
        rows are the buffer."""
        return self.memo is not None

    @property
    def width(self) -> int:
        """The fields of a deque entry: arrival, remaining work, info (and the estimate with
        ``f_est``)."""
        return 3 if self.f_est is None else 4

    @property
    def capacity(self) -> int:
        return self.body.shape[0] // (self.width * self.head.size)

    def deque(self, d: int):
        """``(arr, rem, info, position from the front)`` of every entry of deque ``d``
        (static), and the estimate where kept, ``(Q, R)`` each (position ``>= size``:
        empty)."""
        D, R = self.head.shape
        b = self.body.reshape(D, self.capacity, R, self.width)[d]
        pos = jnp.arange(self.capacity, dtype=jnp.int32)[:, None] - self.head[d][None]
        pos = jnp.where(pos < 0, pos + self.capacity, pos)  # (a remainder: 8 operations)
        est = (b[..., 3],) if self.width > 3 else ()
        return b[..., 0], b[..., 1], decode(b[..., 2]), pos, *est
