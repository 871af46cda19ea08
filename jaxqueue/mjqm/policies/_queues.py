"""The job lists as the event engine keeps them, and the picks of a policy.

The engine (``jaxqueue.mjqm._events``) does not keep every job in one arrival-ordered buffer
(a departure would shift it, and every policy would scan it at every event: about a hundred
passes over ``(slots, replications)`` per event). Per replication it keeps

* the jobs in service in ``M = s // min(need)`` slots: absolute end time ``s_end``
  (``inf``: empty), arrival time ``s_arr`` and a packed ``s_info`` (need 0: empty); unordered,
  or where the policy's ``sorted_slots`` (easy-backfilling) sorted by end time, then arrival
  time, the empty slots last;
* the waiting jobs in ``D`` ring-buffer deques of ``Q`` entries, each in arrival order: one
  global FIFO (``layout = "fifo"``: fcfs, window, EASY), one per distinct need (``"need"``:
  first-fit, preemptive-first-fit, msf; a preempted job goes back to the front of its need's
  deque, as it is older than every waiting job of that need). The front of every deque is
  also kept in registers (``f_*``), so a policy reads no deque memory; the bodies are
  touched by one gather or scatter per change. A policy's ``front_registers`` may keep more
  of a single FIFO there: ``window:W`` its first ``W`` entries (mirrored in the body),
  easy-backfilling its first 16 waiting jobs (the body holds those behind them:
  ``_events._take_inside``).

All arrays carry the replications on their last axis. A policy looks at this state and names
one *pick* (:class:`Pick`): start a waiting job (deque ``d``, position ``p``) or preempt the
job in service in slot ``i``. The engine applies picks one at a time at the same instant until
the policy names none, then goes on to the next event. Every policy here is a first fit in a
priority order, so picks made one at a time reach the set in service of the policy's ``select``
on the whole job list: the highest-priority waiting job that fits in what the higher-priority
jobs in service leave starts, after the lowest-priority jobs in service are preempted until it
fits (a job started at an instant is never preempted at that instant, so waits are unchanged).

A policy that only ever serves among the first ``W`` jobs in the system (``layout =
"window"``: server-filling, whose arrival-order prefix holds at most ``W = (s - 1) //
min(need) + 1`` jobs) has no picks: those jobs sit in ``W`` unordered rows (``s_*``; in
service or not, with their first wait ``s_wait`` and their place in the arrival order:
``s_before``, the needs of the jobs ahead, and ``s_rank``, 1 + those of the same need ahead)
and the rest in one FIFO; the policy chooses the rows in service afresh at every event
(``WindowPolicy.serve``), so a job costs two rounds, its arrival and its completion.

Times are relative to an epoch that the engine moves to the clock every few rounds (float32
runs keep their digits); ``f_rem`` and the deques hold remaining work.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float, Int

from ._base import cumsum

__all__ = [
    "Queues",
    "Pick",
    "pack",
    "need_of",
    "cls_of",
    "code_of",
    "started_of",
    "settle",
    "settling",
    "rows_min",
    "rows_sum",
    "rows_any",
    "rows_first",
]

_CLS_SHIFT, _CODE_SHIFT, _STARTED_SHIFT, _RUN_SHIFT = 16, 26, 28, 29


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
    """In service (``"window"`` layout: bit 29 of the packed info)."""
    return ((info >> _RUN_SHIFT) & 1).astype(bool)


def with_running(info, run):
    return (info & ~(1 << _RUN_SHIFT)) | (run.astype(jnp.int32) << _RUN_SHIFT)


_UNIT: list = []  # the traced 1 of the engine run being traced (settle)


@contextlib.contextmanager
def settling(one):
    """Within it, :func:`settle` materialises its values, with ``one``: an int32 scalar that
    is 1 at run time but not a constant to XLA (the engine passes ``min(n_jobs, 1)``)."""
    _UNIT.append(one)
    try:
        yield
    finally:
        _UNIT.pop()


def settle(*xs):
    """``xs`` computed once, before their consumers. XLA fuses a round's per-replication
    decisions (``(R,)`` masks, indices, values: tens of operations each) into every
    ``(slots, R)`` update that uses them and recomputes them for each element (measured at
    1024 replications: 20-140 us per such fusion). An optimisation barrier is removed before
    fusion, a reduce of two copies is simplified away, and an integer division by a traced 1
    (an expensive operation, never duplicated) costs 2.5 ns per value; a ``while_loop`` that
    runs once (its trip count ``one`` unknown to XLA) hands on materialised buffers for the
    price of one loop. Exact: the loop multiplies by 1. Outside :func:`settling`, the
    identity."""
    if not _UNIT:
        return xs
    one = _UNIT[-1]

    def once(c):
        k, xs = c
        return k + 1, jax.tree.map(lambda x: _times(x, one), xs)

    return lax.while_loop(lambda c: c[0] < one, once, (jnp.int32(0), xs))[1]


def _times(x, one):
    """``x`` times the traced 1 (for booleans: and with ``one > 0``; for floats a select on
    ``one > 0``: a float multiply flushes subnormals to zero on XLA:CPU, and the packed job
    info of a float32 deque body, bitcast, is subnormal for unmeasured jobs)."""
    if x.dtype == jnp.bool_:
        return x & (one > 0)
    if jnp.issubdtype(x.dtype, jnp.floating):
        return jnp.where(one > 0, x, jnp.zeros((), x.dtype))
    return x * one.astype(x.dtype)


def _rows(op, x, axis, settled):
    """Reduce ``axis`` (static, short) of ``x`` with the elementwise ``op``, as a balanced tree
    of row operations: one fused elementwise pass. XLA:CPU's own reduce over a leading axis of
    ``(20, 1024)`` was measured 2-3x slower, and is split over threads, which waits on a busy
    core. Exact for min, max and integer sums (the order does not matter). An elementwise tree
    is fused into each consumer and recomputed for every element it feeds: ``settled`` (default:
    more than 8 rows) materialises the result first (:func:`settle`)."""
    rows = [lax.index_in_dim(x, i, axis, keepdims=False) for i in range(x.shape[axis])]
    while len(rows) > 1:
        pairs = [op(rows[i], rows[i + 1]) for i in range(0, len(rows) - 1, 2)]
        rows = pairs + rows[len(pairs) * 2 :]
    if settled is None:
        settled = x.shape[axis] > 8
    return settle(rows[0])[0] if settled else rows[0]


def rows_min(x, axis=0, settled=None):
    return _rows(jnp.minimum, x, axis, settled)


def rows_sum(x, axis=0, settled=None):
    return _rows(jnp.add, x, axis, settled)


def rows_any(x, axis=0, settled=None):
    return _rows(jnp.logical_or, x, axis, settled)


def rows_first(keys, values):
    """Per replication, ``values`` (arrays over ``(slots, R)``) at the slot with the smallest
    ``keys`` (compared in order: lexicographic; the lowest slot on ties), from one tree of
    comparisons over the slots, materialised once (:func:`settle`)."""
    rows = [
        tuple(lax.index_in_dim(x, i, 0, keepdims=False) for x in (*keys, *values))
        for i in range(keys[0].shape[0])
    ]
    nk = len(keys)

    def better(a, b):  # b strictly before a
        lt, eq = b[0] < a[0], b[0] == a[0]
        for x, y in zip(a[1:nk], b[1:nk], strict=True):
            lt, eq = lt | (eq & (y < x)), eq & (y == x)
        return tuple(jnp.where(lt, y, x) for x, y in zip(a, b, strict=True))

    while len(rows) > 1:
        pairs = [better(rows[i], rows[i + 1]) for i in range(0, len(rows) - 1, 2)]
        rows = pairs + rows[len(pairs) * 2 :]
    return settle(*rows[0][nk:])


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
    ``(D, Q, R, 3)`` (arrival, remaining work, encoded info side by side: a front refill reads
    one cache line per replication) flattened; ``free`` servers; ``busy``: jobs in service
    per per-need deque (``"need"`` layout). ``"window"`` layout: ``s_*`` are its ``W`` rows
    (``s_end``: the end time of a job in service, else its remaining work), with ``s_wait``,
    ``s_before``, ``s_rank`` (module docstring; other layouts: no rows)."""

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

    @property
    def capacity(self) -> int:
        return self.body.shape[0] // (3 * self.head.size)

    def deque(self, d: int):
        """``(arr, rem, info, position from the front)`` of every entry of deque ``d``
        (static), ``(Q, R)`` each (position ``>= size``: empty)."""
        D, R = self.head.shape
        b = self.body.reshape(D, self.capacity, R, 3)[d]
        pos = jnp.arange(self.capacity, dtype=jnp.int32)[:, None] - self.head[d][None]
        pos = jnp.where(pos < 0, pos + self.capacity, pos)  # (a remainder: 8 operations)
        return b[..., 0], b[..., 1], decode(b[..., 2]), pos


class Pick(NamedTuple):
    """What a policy does next at this instant, per replication: ``kind`` 0 nothing, 1 start
    position ``p`` of deque ``d``, 2 preempt slot ``i``. ``more``: another pick may
    follow (``False`` only where the policy knows that none does)."""

    kind: Int[Array, " R"]
    d: Int[Array, " R"]
    p: Int[Array, " R"]
    i: Int[Array, " R"]
    more: Bool[Array, " R"]


def start(d, ok, p=0, more=True) -> Pick:
    """Start position ``p`` of deque ``d`` where ``ok``."""
    z = jnp.zeros_like(ok, jnp.int32)
    return Pick(ok.astype(jnp.int32), z + d, z + p, z, jnp.asarray(more) & ok)


def first_where(valid, key):
    """Per replication, the index (axis 0) of the smallest ``key`` where ``valid`` (the first
    on ties) and whether there is one; a min, not an argmin (cheaper on the CPU)."""
    k = jnp.where(valid, key, jnp.inf)
    low = rows_min(k)
    idx = jnp.arange(valid.shape[0], dtype=jnp.int32)[:, None]
    i = rows_min(jnp.where(valid & (k == low[None]), idx, valid.shape[0]))
    return i, rows_any(valid)


def lowest_in_service(q: Queues, by_need: bool):
    """Slot of the lowest-priority job in service: the latest arrival (arrival order) or the
    latest arrival of the smallest need (msf order)."""
    sn = need_of(q.s_info)
    busy = sn > 0
    if by_need:
        busy = busy & (sn == rows_min(jnp.where(busy, sn, 1 << 16))[None])
    i, _ = first_where(busy, -q.s_arr)
    return i


def priority_fit(q: Queues, s: int, needs, ahead, order, by_need: bool) -> Pick:
    """The preemptive first fit in a priority order, one pick (module docstring): among the
    fronts of the per-need deques ``d < len(needs)``, the highest-priority one (smallest
    ``order``) that fits in what the jobs in service ahead of it leave (``ahead``: their
    servers, ``(K, R)``); it starts if it fits in the free servers, else the lowest-priority
    job in service is preempted."""
    K = len(needs)
    need_d = jnp.asarray(needs, jnp.int32)[:, None]
    fits = (q.size[:K] > 0) & (need_d <= s - ahead)
    d, any_fit = first_where(fits, order)
    hit = jnp.arange(K, dtype=jnp.int32)[:, None] == d[None]
    need = rows_sum(jnp.where(hit, need_d, 0))
    go = need <= q.free
    kind = jnp.where(any_fit, jnp.where(go, 1, 2), 0).astype(jnp.int32)
    i = jnp.where(kind == 2, lowest_in_service(q, by_need), 0)
    # after a start, another pick follows only if a front still fits: the started job is
    # ahead of the fronts of lower priority (and of the next job of its own need, whose
    # servers ahead are at least these: a bound, so ``more`` may only err towards True)
    behind = (order >= rows_sum(jnp.where(hit, order, 0))[None]) | hit
    fits_after = (q.size[:K] - hit > 0) & (need_d <= s - ahead - jnp.where(behind, need, 0))
    more = jnp.where(kind == 1, rows_any(fits_after), any_fit)
    return Pick(kind, d, jnp.zeros_like(d), i, more)


def by_arrival(q: Queues, s: int, needs) -> Pick:
    """preemptive-first-fit: priority = arrival order over all jobs; the servers ahead of a
    front are those of the jobs in service that arrived before it."""
    K = len(needs)
    sn = need_of(q.s_info)
    older = q.s_arr[None] < q.f_arr[:K, None]  # (K, M, R)
    ahead = rows_sum(jnp.where(older, sn[None], 0), axis=1)
    return priority_fit(q, s, needs, ahead, q.f_arr[:K], False)


def by_need(q: Queues, s: int, needs) -> Pick:
    """msf order (need largest first, arrival order within a need): the jobs in service of
    need at least the front's are ahead of it (those of its own need are older: the deque
    holds the rest). From the per-need counts in service, no pass over the slots."""
    K = len(needs)
    servers = q.busy[:K] * jnp.asarray(needs, jnp.int32)[:, None]
    ahead = cumsum(servers)  # needs are largest first
    order = jnp.broadcast_to(jnp.arange(K, dtype=q.f_arr.dtype)[:, None], servers.shape)
    return priority_fit(q, s, needs, ahead, order, True)
