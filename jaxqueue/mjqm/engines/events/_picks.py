"""A policy's next pick on the job lists of the event engine (:mod:`._queues`).

A pick is one start (a waiting job of deque ``d``, position ``p``) or one preemption (the job
in service in slot ``i``); the engine applies picks one at a time at the same instant until
none is left. Every policy is a first fit in a priority order (its ``Order``), so picks made
one at a time reach the set in service of its ``select`` on the whole job list: the
highest-priority waiting job that fits in what the higher-priority jobs in service leave
starts, after the lowest-priority jobs in service are preempted until it fits (a job started
at an instant is never preempted at that instant, so waits are unchanged).

The picks here are keyed by the policy's facts (``_layout.layout_of`` chooses one): the front
of the FIFO (no backfilling), the oldest fitting front of the per-need deques (first fit),
the oldest fitting job among ``W`` front registers (a lookahead of ``W``), EASY's reservation
(the slots sorted by end time make it a prefix sum), the preemptive first fit in arrival or
need order; and :func:`serve_prefix`, the set in service of a policy that serves only within
its arrival-order prefix whose needs reach ``s``, chosen afresh at every event.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Int

from ...._jit import rows_any, rows_max, rows_min, rows_sum, settle
from ...policies import Order
from ...policies._base import cumsum
from ._queues import Queues, need_of

__all__ = [
    "Pick",
    "REGISTERS",
    "front",
    "fronts_by_arrival",
    "lookahead",
    "easy",
    "partitions",
    "by_arrival",
    "by_need",
    "by_weight",
    "serve_prefix",
]

REGISTERS = 16  # waiting jobs EASY keeps in the front registers (:func:`easy`)


class Pick(NamedTuple):
    """What a policy does next at this instant, per replication: ``kind`` 0 nothing, 1 start
    position ``p`` of deque ``d``, 2 preempt slot ``i``. ``more``: another pick may
    follow (``False`` only where the policy knows that none does). ``mark``: the started
    job runs on the helpers (``Layout.classes``; else ``None``)."""

    kind: Int[Array, " R"]
    d: Int[Array, " R"]
    p: Int[Array, " R"]
    i: Int[Array, " R"]
    more: Bool[Array, " R"]
    mark: Bool[Array, " R"] | None = None


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


def lowest_in_service(q: Queues, order: Order):
    """Slot of the lowest-priority job in service in ``order``: the latest arrival (arrival
    order) or the latest arrival of the smallest need (most servers first) or of the largest
    (least servers first)."""
    sn = need_of(q.s_info)
    busy = sn > 0
    if order is Order.MOST_SERVERS:
        busy = busy & (sn == rows_min(jnp.where(busy, sn, 1 << 16))[None])
    elif order is Order.LEAST_SERVERS:
        busy = busy & (sn == rows_max(jnp.where(busy, sn, 0))[None])
    i, _ = first_where(busy, -q.s_arr)
    return i


def priority_fit(q: Queues, s: int, needs, ahead, rank, order: Order, lowest=None) -> Pick:
    """The preemptive first fit in a priority order, one pick (module docstring): among the
    fronts of the per-need deques ``d < len(needs)``, the highest-priority one (smallest
    ``rank``, in ``order``) that fits in what the jobs in service ahead of it leave
    (``ahead``: their servers, ``(K, R)``); it starts if it fits in the free servers, else
    the lowest-priority job in service is preempted (``lowest(q)``: its slot; default
    :func:`lowest_in_service` in ``order``)."""
    K = len(needs)
    need_d = jnp.asarray(needs, jnp.int32)[:, None]
    fits = (q.size[:K] > 0) & (need_d <= s - ahead)
    d, any_fit = first_where(fits, rank)
    hit = jnp.arange(K, dtype=jnp.int32)[:, None] == d[None]
    need = rows_sum(jnp.where(hit, need_d, 0))
    go = need <= q.free
    kind = jnp.where(any_fit, jnp.where(go, 1, 2), 0).astype(jnp.int32)
    low = lowest_in_service(q, order) if lowest is None else lowest(q)
    i = jnp.where(kind == 2, low, 0)
    # after a start, another pick follows only if a front still fits: the started job is
    # ahead of the fronts of lower priority (and of the next job of its own need, whose
    # servers ahead are at least these: a bound, so ``more`` may only err towards True)
    behind = (rank >= rows_sum(jnp.where(hit, rank, 0))[None]) | hit
    fits_after = (q.size[:K] - hit > 0) & (need_d <= s - ahead - jnp.where(behind, need, 0))
    more = jnp.where(kind == 1, rows_any(fits_after), any_fit)
    return Pick(kind, d, jnp.zeros_like(d), i, more)


def by_arrival(q: Queues, s: int, needs, now=None) -> Pick:
    """Preemptive first fit in arrival order over all jobs (preemptive-first-fit): the servers
    ahead of a front are those of the jobs in service that arrived before it."""
    K = len(needs)
    sn = need_of(q.s_info)
    older = q.s_arr[None] < q.f_arr[:K, None]  # (K, M, R)
    ahead = rows_sum(jnp.where(older, sn[None], 0), axis=1)
    return priority_fit(q, s, needs, ahead, q.f_arr[:K], Order.ARRIVAL)


def by_need(order: Order, q: Queues, s: int, needs, now=None) -> Pick:
    """Preemptive first fit by need (``order``: most or least servers first; arrival order
    within a need): the jobs in service of a need ahead of the front's, or of its own need,
    are ahead of it (those of its own need are older: the deque holds the rest). From the
    per-need counts in service, no pass over the slots."""
    K = len(needs)
    servers = q.busy[:K] * jnp.asarray(needs, jnp.int32)[:, None]
    if order is Order.MOST_SERVERS:
        ahead = cumsum(servers)  # needs are largest first
        rank = jnp.broadcast_to(jnp.arange(K, dtype=q.f_arr.dtype)[:, None], servers.shape)
    else:
        ahead = cumsum(servers[::-1])[::-1]
        rank = jnp.broadcast_to(
            jnp.arange(K - 1, -1, -1, dtype=q.f_arr.dtype)[:, None], servers.shape
        )
    return priority_fit(q, s, needs, ahead, rank, order)


def by_weight(q: Queues, s: int, needs, now=None) -> Pick:
    """Preemptive first fit in MaxWeight's order (maxweight): the needs by weight ``c_n x
    floor(s / n)`` (``c_n``: the jobs of need ``n`` waiting or in service; a larger need first
    on equal weights), arrival order within a need. The counts do not change between the
    picks of an instant, so the order holds while they reach ``select``'s set. From the
    per-need counts, no pass over the slots but the preemption's."""
    K = len(needs)
    need_d = jnp.asarray(needs, jnp.int32)[:, None]
    w = (q.size[:K] + q.busy[:K]) * (s // need_d)
    ranks = [
        sum(
            ((w[j] > w[k]) | ((w[j] == w[k]) & (j < k))).astype(jnp.int32)
            for j in range(K)
            if j != k
        )
        + jnp.zeros_like(w[k])
        for k in range(K)
    ]
    rank = jnp.stack(ranks)
    servers = q.busy[:K] * need_d
    ahead = jnp.stack(
        [
            servers[k]
            + sum(jnp.where(rank[j] < rank[k], servers[j], 0) for j in range(K) if j != k)
            for k in range(K)
        ]
    )

    def lowest(q):  # the latest arrival of the need of the highest rank in service
        sn = need_of(q.s_info)
        slot_rank = sum(jnp.where(sn == v, rank[k][None], 0) for k, v in enumerate(needs))
        busy = sn > 0
        worst = rows_max(jnp.where(busy, slot_rank, -1))
        i, _ = first_where(busy & (slot_rank == worst[None]), -q.s_arr)
        return i

    return priority_fit(q, s, needs, ahead, rank.astype(q.f_arr.dtype), Order.MAX_WEIGHT, lowest)


def front(q: Queues, s: int, needs, now=None) -> Pick:
    """The front of the FIFO starts if it fits (and another may follow if servers and
    jobs are left)."""
    need = need_of(q.f_info[0])
    ok = (q.size[0] > 0) & (need <= q.free)
    return start(0, ok, more=(q.size[0] > 1) & (q.free - need >= min(needs)))


def fronts_by_arrival(q: Queues, s: int, needs, now=None) -> Pick:
    """The oldest front of the per-need deques whose need fits in the free servers (within a
    need, jobs start in arrival order: the free count only falls during a scan)."""
    need = jnp.asarray(needs, jnp.int32)[:, None]
    fits = (q.size > 0) & (need <= q.free)
    d, ok = first_where(fits, q.f_arr)
    hit = jnp.arange(len(needs), dtype=jnp.int32)[:, None] == d
    left = q.free - jnp.sum(jnp.where(hit, need, 0), axis=0)
    more = jnp.any((q.size - hit > 0) & (need <= left), axis=0)
    return start(d, ok, more=more)


def lookahead(W: int, q: Queues, s: int, needs, now=None) -> Pick:
    """The oldest of the first ``W`` jobs of the FIFO that fits in the free servers (all
    ``W`` are in the front registers: no pass over the deque)."""
    need = need_of(q.f_info)
    pos = jnp.arange(W, dtype=jnp.int32)[:, None]
    ok = (pos < q.size[0]) & (need <= q.free)
    p = rows_min(jnp.where(ok, pos, W))
    left = q.free - rows_sum(jnp.where(pos == p, need, 0))
    return start(0, p < W, p, more=(q.size[0] > 1) & (left >= min(needs)))


def easy(q: Queues, s: int, needs, now) -> Pick:
    """EASY backfilling: the front of the FIFO if it fits; else the oldest later job that fits
    now and ends by the head's reservation ``t_r`` (the first end time of a job in service by
    which the free servers plus those of the jobs in service ending by then reach the head's
    need: a cumulative sum over the slots, which the engine keeps sorted by end time).

    With estimates (``Layout.estimated``: the slots sorted by estimated end, start plus
    estimate), the times are the estimated ones as the policy's ``select`` computes them: a
    job in service has its estimate less the time since its start left (``est - (now -
    start)``), a waiting job its estimate.

    The first ``REGISTERS`` waiting jobs are in the front registers (the deque body holds
    the jobs behind them: ``_deques._take_inside``), so the pick reads ``REGISTERS`` rows,
    not the deque. Only where the head does not fit, no registered job qualifies and more
    jobs wait may the job lie in the body: one pass over it (``Q x R`` entries), under a
    ``lax.cond`` on any replication needing it. A position and a need are packed in one
    int32 (position above 16 bits): ``Layout.max_buffer`` caps the FIFO at 2^14 entries."""
    R = REGISTERS
    size, free = q.size[0], q.free
    head = need_of(q.f_info[0])
    head_fits = (size > 0) & (head <= free)
    sn, se = need_of(q.s_info), q.s_end
    # the servers free once the job of each row has ended (the rows sorted by end time)
    freed = free + cumsum(sn)
    if q.f_est is None:
        t_r = rows_min(jnp.where((sn > 0) & (freed >= head), se, jnp.inf))
        by, rem = t_r - now, q.f_rem  # a later job starts if it ends by then
    else:  # the time left to each estimated end (the rows sorted by it): the estimate less
        # the time since the start, exact where the times are whole or the job started now
        (left,) = settle(q.s_est - (now[None] - q.s_start))
        by = rows_min(jnp.where((sn > 0) & (freed >= head), left, jnp.inf))
        rem = q.f_est
    # the oldest registered job that fits now and ends by t_r, and its need (one minimum
    # of position and need packed, < 2**16); the head fits (row 0) or it is not one
    need = need_of(q.f_info)
    rows = jnp.arange(R, dtype=jnp.int32)[:, None]
    ok = (rows < size) & (need <= free) & (rem <= by)
    key = rows_min(jnp.where(ok, rows << 16 | need, q.capacity << 16), settled=False)
    # the same over the body where the registers have none but more jobs wait
    behind = ~head_fits & (key >> 16 >= q.capacity) & (size > R) & (free >= min(needs))
    # a fresh closure: JAX caches a branch's trace by its function, and `_behind` settles
    # with the traced unit of this kernel's trace (a cached one leaks it to the next kernel)
    body = lambda q, key, by: _behind(q, key, by)  # noqa: E731
    key = lax.cond(jnp.any(behind), body, lambda q, key, by: key, q, key, by)
    p = jnp.where(head_fits, 0, key >> 16)
    left = free - jnp.where(head_fits, head, key & 0xFFFF)
    # another pick may follow if another waiting job fits in what is left (in the body:
    # any need): a tighter bound than min(needs), so fewer rounds pick nothing
    others = jnp.where((rows < size) & (rows != p), need, 1 << 16)
    least = jnp.where(size > R, min(needs), rows_min(others, settled=False))
    more = left >= least
    return start(0, head_fits | (p < q.capacity), p, more=more)


def partitions(reserve, helpers, q: Queues, s: int, needs, now=None) -> Pick:
    """Partitions per class and shared helpers (balanced-splitting), on one deque per class
    (``busy``: the servers of each partition in use): the oldest front that fits in its
    class's partition; else the oldest front of a need up to ``helpers`` starts on the
    helpers if it fits there, or blocks them. ``select``'s scan in arrival order, one start
    at a time: a class's jobs share one need, so behind a front that does not fit in its
    partition none does, and a start on one side leaves the other's room as it was."""
    K = len(reserve)
    need = need_of(q.f_info[:K])
    waits = q.size[:K] > 0
    own = jnp.asarray(reserve, jnp.int32)[:, None] - q.busy[:K]
    in_part = waits & (need <= own)
    free_h = q.free - (s - helpers) + rows_sum(q.busy[:K], settled=False)
    may_help = waits & (need <= helpers)
    d_part, part = first_where(in_part, q.f_arr[:K])
    d_help, any_help = first_where(may_help, q.f_arr[:K])
    d = jnp.where(part, d_part, d_help)
    hit = jnp.arange(K, dtype=jnp.int32)[:, None] == d[None]
    n = rows_sum(jnp.where(hit, need, 0))
    on_helpers = ~part & any_help & (n <= free_h)
    ok = part | on_helpers
    # another pick may follow if a front still fits (the next job of the started one's class
    # has its need)
    left = waits & ((q.size[:K] > 1) | ~hit)
    own = own - jnp.where(hit & part[None], n[None], 0)
    free_h = free_h - jnp.where(on_helpers, n, 0)
    more = rows_any(left & ((need <= own) | (need <= free_h[None])))
    z = jnp.zeros_like(d)
    return Pick(ok.astype(jnp.int32), d, z, z, ok & more, on_helpers)


def _behind(q: Queues, key, by):
    """``key`` where it names a registered job; else the position and need of the oldest job
    in the deque body (positions ``REGISTERS`` on) that fits now and ends by ``by`` (by its
    estimate where the body keeps them): one pass over every entry."""
    _, rem, info, pos, *est = q.deque(0)
    rem = est[0] if est else rem
    need = need_of(info)
    ok = (pos >= REGISTERS) & (pos < q.size[0]) & (need <= q.free) & (rem <= by)
    body = rows_min(jnp.where(ok, pos << 16 | need, q.capacity << 16))
    return jnp.minimum(key, body)


def serve_prefix(order_needs, need, before, rank, s: int):
    """The rows in service after an event, chosen afresh, of a policy that serves only within
    its arrival-order prefix whose needs reach ``s`` (``prefix_servers``) by first fit in the
    need order ``order_needs``; per row ``(rows, R)``: its ``need`` (0: an empty row),
    ``before`` (the needs of the jobs ahead of it in arrival order) and ``rank`` (1 + the jobs
    of its need ahead of it). A row is in the prefix where the jobs ahead of it need fewer
    than ``s`` servers; the first fit takes, of each need ``v`` in turn, the first
    ``min(n_v, free // v)`` jobs of the prefix, ``n_v`` those in the prefix."""
    prefix = (need > 0) & (before < s)
    counts = [
        rows_sum((prefix & (need == v)).astype(jnp.int32), settled=False) for v in order_needs
    ]
    takes, free = [], jnp.int32(s)
    for v, n in zip(order_needs, counts, strict=True):
        takes.append(jnp.minimum(n, free // v))
        free = free - takes[-1] * v
    takes = settle(*takes)  # per replication, once (not per row and slot)
    k = sum(jnp.where(need == v, t[None], 0) for v, t in zip(order_needs, takes, strict=True))
    return prefix & (rank <= k)
