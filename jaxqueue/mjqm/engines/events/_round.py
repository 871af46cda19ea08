"""One round of the event engine: the next event of every replication and the policy's pick.

A round of a replication is its next event (an arrival or a completion, whichever comes first;
skipped while a pick is pending) followed by one pick of the policy (:mod:`._picks`: start a
waiting job or preempt one in service) at the new instant; picks repeat, one per round, until
the policy names none. An event touches one slot and one deque entry, so a round costs the
same whatever the queue length. With prefix rows (``Layout.rows``) there are no picks: the
event is followed by the choice of the rows in service (:func:`_event_rows`), so a job costs
two rounds, its arrival and its completion.

An arrival (or a preemption) that finds its deque full stops its replication before the event
(``overflow``); the driver goes on with a larger deque.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array

from ...._jit import rows_any, rows_min, rows_sum, settle
from ...policies import Jobs
from ._accumulate import _Acc, _integrate, _record_departure, _record_start, _record_wait
from ._deques import _deque_of, _occupy, _onehot, _push, _refill, _take, _vacate
from ._layout import Layout
from ._picks import serve_prefix
from ._queues import (
    Queues,
    cls_of,
    mark_of,
    need_of,
    pack,
    rows_first,
    running_of,
    set_started,
    started_of,
    with_mark,
    with_running,
)


class _State(NamedTuple):
    """All replications (the last axis of every array)."""

    q: Queues
    now: Array  # clock, relative to the epoch of the arrival and end times
    to_arrival: Array  # time until the next arrival
    n_next: Array  # index of the next arriving job
    count: Array  # jobs in the system
    pending: Array  # a pick was made at this instant: pick again before the next event
    acc: _Acc
    overflow: Array  # an arrival or a pick found its deque full: stopped before it
    events: Array  # arrivals and completions so far


def _empty(
    s: int,
    M: int,
    D: int,
    Q: int,
    R: int,
    K: int,
    n_bins: int,
    dt,
    F: int = 1,
    rows=False,
    sizes=False,
    estimates=False,
    waits=False,
    ends=False,
) -> _State:
    """``R`` empty replications of ``s`` servers: ``M`` service slots (with ``rows``, the
    prefix rows), ``D`` deques of ``Q`` entries (``F`` front registers: one per
    deque, or the first ``F`` entries of a single FIFO); ``K`` classes, ``n_bins``
    bins per class of the waiting- and response-time histograms; ``sizes``: every job in a
    row (``Layout.all_rows``: the sizes kept, no order fields); ``estimates``: an estimate per
    row (``Layout.estimate``); ``waits``: a wait per slot (``Layout.slot_waits``); ``ends``:
    the slots sorted by estimated end, the estimates of the waiting jobs
    (``Layout.estimated``)."""
    f = lambda *shape: jnp.zeros((*shape, R), dt)  # noqa: E731
    i = lambda *shape: jnp.zeros((*shape, R), jnp.int32)  # noqa: E731
    q = Queues(
        s_end=jnp.full((M, R), jnp.inf, dt),
        s_arr=f(M),
        s_info=i(M),
        f_arr=f(max(D, F)),
        f_rem=f(max(D, F)),
        f_info=i(max(D, F)),
        body=jnp.zeros(D * Q * R * (4 if ends else 3), dt),
        head=i(D),
        size=i(D),
        busy=i(D),
        free=jnp.full(R, s, jnp.int32),
        s_wait=f(M if rows or waits else 0),
        s_before=i(M if rows and not sizes else 0),
        s_rank=i(M if rows and not sizes else 0),
        s_size=f(M) if sizes else None,
        memo=i() if sizes else None,
        s_est=f(M) if estimates or ends else None,
        s_start=jnp.full((M, R), jnp.inf, dt) if ends else None,
        f_est=f(max(D, F)) if ends else None,
    )
    hists = (i(K * n_bins), i(K * n_bins))  # waits, responses
    acc = _Acc(f(K), f(K), f(K), f(K), f(K), f(), f(), f(), f(), f(), f(), f(), *hists)
    return _State(q, f(), f(), i(), i(), i().astype(bool), acc, i().astype(bool), i())


class _Ctx(NamedTuple):
    """Static facts of a run: the policy's layout, servers, distinct needs (largest first),
    whether the system is saturated, the buffer, and the measured jobs ``warmup .. n_jobs -
    1``."""

    layout: Layout
    s: int
    needs: tuple
    saturated: bool
    B: int
    warmup: Array
    n_jobs: Array
    bins: tuple  # (n_bins, shift, lo_code) of the waiting- and response-time histograms


def _clock(ctx: _Ctx, st: _State):
    """Time until the next arrival and whether the state is inside the measuring window."""
    if ctx.saturated:  # topped up at once; measured over the departures warmup .. n_jobs
        to_arrival = jnp.where(st.count >= ctx.B, jnp.inf, 0.0).astype(st.now.dtype)
        return to_arrival, st.acc.done >= ctx.warmup
    # measured over the arrivals of the jobs warmup .. n_jobs - 1
    return st.to_arrival, (st.n_next > ctx.warmup) & (st.n_next <= ctx.n_jobs)


def _arrival_info(ctx: _Ctx, st: _State, need, cls):
    """The packed info of job ``n_next``: measured (code 1, 2 in the second half) or not."""
    n = st.n_next
    mid = (ctx.warmup + ctx.n_jobs) // 2
    code = jnp.where((n >= ctx.warmup) & (n < ctx.n_jobs), 1 + (n >= mid), 0)
    return pack(need, cls, code, jnp.zeros_like(need, bool))


def _advance(ctx: _Ctx, st: _State, q, acc, now, to_arrival, leaves, arrives, on, tau):
    """The state after the event: clock, next arrival, counts."""
    gap = jnp.zeros_like(now) if ctx.saturated else tau
    dt = now - st.now
    return st._replace(
        q=q,
        now=now,
        to_arrival=jnp.where(leaves, to_arrival - dt, jnp.where(arrives, gap, st.to_arrival)),
        n_next=st.n_next + arrives,
        count=st.count + arrives - leaves,
        acc=acc,
        events=st.events + on,
    )


def _event(ctx: _Ctx, st: _State, on, job):
    """The next arrival or completion of every replication where ``on`` (``job``: job
    ``n_next``, the next to arrive, as ``(class, need, service, inter-arrival time)``). Returns
    the state and where an arrival found its deque full (``blocked``: nothing happens,
    overflow)."""
    q, (cls, need, sigma, tau) = st.q, job[:4]
    by_class = ctx.layout.classes > 0
    waits = ctx.layout.slot_waits  # the waits kept in the slots
    # the oldest of the jobs ending first: its end, arrival, slot and info
    if ctx.layout.sorted_slots:  # the first row
        end, arr_j, info_j, wait_j = q.s_end[0], q.s_arr[0], q.s_info[0], ()
        j = jnp.zeros_like(info_j)
    else:
        values = (q.s_end, q.s_arr, q.s_info) + ((q.s_wait,) if waits else ())
        j, (end, arr_j, info_j, *wait_j) = rows_first((q.s_end, q.s_arr), values)
    to_arrival, inside = _clock(ctx, st)
    if by_class:
        d_new = cls
    else:
        d_new = _deque_of(need, ctx.needs) if ctx.layout.per_need else jnp.zeros_like(need)
    arrival_next = st.now + to_arrival < end
    full = rows_sum(jnp.where(_onehot(q.head.shape[0], d_new), q.size, 0)) >= q.capacity
    blocked = on & arrival_next & full
    on = on & ~blocked
    leaves, arrives = on & ~arrival_next, on & arrival_next
    now = jnp.where(leaves, end, jnp.where(arrives, st.now + to_arrival, st.now))
    # the per-need (per-class) deque of the leaving job
    d_j = cls_of(info_j) if by_class else _deque_of(need_of(info_j), ctx.needs)
    on, leaves, arrives, now, j, info_j, arr_j, d_new, d_j, wait_j = settle(
        on, leaves, arrives, now, j, info_j, arr_j, d_new, d_j, wait_j
    )
    acc = _integrate(st.acc, st, now - st.now, inside, rows_any(q.size > 0))
    # a completion: its slot empties
    acc = _record_departure(acc, info_j, now - arr_j, leaves, ctx.bins)
    if waits:
        acc = _record_wait(acc, info_j, wait_j[0], leaves, ctx.bins)
    need_j = jnp.where(leaves, need_of(info_j), 0)
    q = _vacate(q, j, leaves, ctx.layout.sorted_slots or ctx.layout.estimated)
    q = q._replace(free=q.free + need_j)
    if ctx.layout.per_need:  # (no pick on one FIFO reads the counts)
        q = q._replace(busy=q.busy - (_onehot(q.head.shape[0], d_j) & leaves[None]))
    elif by_class:  # the servers of its partition (none on the helpers)
        own = _onehot(q.head.shape[0], d_j) & ~mark_of(info_j)[None]
        q = q._replace(busy=q.busy - jnp.where(own, need_j[None], 0))
    # an arrival: job n_next at the back of its deque
    info = _arrival_info(ctx, st, need, cls)
    est = (job[4],) if ctx.layout.estimated else ()  # its estimate (drawn with the job)
    q = _push(q, d_new, (now, sigma, info, *est), arrives, apart=ctx.layout.inside)
    return _advance(ctx, st, q, acc, now, to_arrival, leaves, arrives, on, tau), blocked


def _event_rows(ctx: _Ctx, st: _State, on, job):
    """:func:`_event` and the policy's choice of the jobs in service with prefix rows
    (``Layout.rows``, :func:`~._picks.serve_prefix`): the first ``W`` jobs in the system sit
    in ``W`` unordered rows (``s_end``: absolute end time in service, else the remaining work;
    ``s_before``: the needs of the jobs ahead of it in arrival order, ``s_rank``: 1 + the jobs
    of its need ahead of it, both kept up to date as jobs leave, so no pass orders the rows),
    the rest in one FIFO. A completion empties its row and the front of the FIFO takes it; an
    arrival takes an empty row, or waits in the FIFO. Then the policy chooses the rows in
    service afresh (preempt-resume) and the wait of a job is kept in its row until it
    leaves."""
    q, (cls, need, sigma, tau) = st.q, job[:4]
    W = q.s_end.shape[0]
    rows = jnp.arange(W, dtype=jnp.int32)[:, None]
    run, need_rows = running_of(q.s_info), need_of(q.s_info)
    ends = jnp.where(run, q.s_end, jnp.inf)
    # the oldest of the jobs ending first (``s_before`` orders the rows by arrival)
    j, (end, arr_j, info_j, wait_j, before_j) = rows_first(
        (ends, q.s_before), (ends, q.s_arr, q.s_info, q.s_wait, q.s_before)
    )
    to_arrival, inside = _clock(ctx, st)
    in_window = st.count < W  # then the FIFO is empty
    arrival_next = st.now + to_arrival < end
    blocked = on & arrival_next & ~in_window & (q.size[0] >= q.capacity)
    on = on & ~blocked
    leaves, arrives = on & ~arrival_next, on & arrival_next
    now = jnp.where(leaves, end, jnp.where(arrives, st.now + to_arrival, st.now))
    info = _arrival_info(ctx, st, need, cls)
    # the job that takes a row: the front of the FIFO on a completion, else the arrival
    refill = leaves & (q.size[0] > 0)
    put = refill | (arrives & in_window)
    slot = jnp.where(leaves, j, rows_min(jnp.where(need_rows == 0, rows, W), settled=False))
    item = tuple(
        jnp.where(leaves, x[0], y)
        for x, y in zip((q.f_arr, q.f_rem, q.f_info), (now, sigma, info), strict=True)
    )
    need_j = jnp.where(leaves, need_of(info_j), 0)
    v = need_of(item[2])
    ahead = rows_sum(need_rows, settled=False) - need_j
    same = rows_sum((need_rows == v).astype(jnp.int32), settled=False) - (need_j == v)
    decided = (on, leaves, arrives, refill, put, now, slot, item, ahead, same)
    leaving = (info_j, arr_j, wait_j, before_j, need_j)
    decided, leaving = settle(decided, leaving)
    on, leaves, arrives, refill, put, now, slot, item, ahead, same = decided
    info_j, arr_j, wait_j, before_j, need_j = leaving
    someone_waits = st.count > rows_sum(run.astype(jnp.int32), settled=False)
    acc = _integrate(st.acc, st, now - st.now, inside, someone_waits)
    acc = _record_departure(acc, info_j, now - arr_j, leaves, ctx.bins)
    acc = _record_wait(acc, info_j, wait_j, leaves, ctx.bins)
    acc = _record_start(acc, info_j, arr_j, wait_j, jnp.full_like(now, jnp.nan), leaves)
    # the rows: the leaving job's row empties, the jobs behind it move up in the order
    later = leaves[None] & (q.s_before > before_j[None])
    hit = (rows == slot[None]) & put[None]
    gone = (rows == j[None]) & leaves[None]
    before = jnp.where(hit, ahead[None], jnp.where(later, q.s_before - need_j[None], q.s_before))
    rank = q.s_rank - (later & (need_rows == need_j[None]))
    rank = jnp.where(hit, same[None] + 1, rank)
    s_info = jnp.where(hit, item[2][None], jnp.where(gone, 0, q.s_info))
    s_end = jnp.where(hit, item[1][None], q.s_end)
    s_arr = jnp.where(hit, item[0][None], q.s_arr)
    # the FIFO: the arrival at its back, or its front into the row
    q = _push(q, jnp.zeros_like(slot), (now, sigma, info), arrives & ~in_window)
    q, _ = _take(q, jnp.zeros_like(slot), jnp.zeros_like(slot), refill, False)
    q = _refill(q, jnp.zeros_like(slot), refill)
    # the policy's choice: starts (end = now + remaining work), preemptions (the reverse)
    need_rows = need_of(s_info)
    new = serve_prefix(ctx.layout.serve_needs, need_rows, before, rank, ctx.s)
    (new,) = settle(new)
    old = running_of(s_info)
    start, stop = new & ~old, old & ~new
    first = start & ~started_of(s_info)
    q = q._replace(
        s_end=jnp.where(start, now[None] + s_end, jnp.where(stop, s_end - now[None], s_end)),
        s_arr=s_arr,
        s_info=with_running(jnp.where(start, set_started(s_info), s_info), new),
        s_wait=jnp.where(first, now[None] - s_arr, q.s_wait),
        s_before=before,
        s_rank=rank,
        free=ctx.s - rows_sum(jnp.where(new, need_rows, 0), settled=False),
    )
    return _advance(ctx, st, q, acc, now, to_arrival, leaves, arrives, on, tau), blocked


def _event_all(ctx: _Ctx, st: _State, on, job):
    """:func:`_event` and the policy's ``select`` on every job (``Layout.all_rows``): the
    jobs in the system in the rows ``0 .. count - 1`` in arrival order (``s_end``: absolute
    end time in service, else the remaining work; ``s_size``: the size drawn at arrival). A
    completion removes its row (the rows behind it move up one), an arrival takes row
    ``count``; then ``select`` chooses the rows in service afresh on the job list (preempt-
    resume; a non-preemptive policy keeps those in service) and the wait of a job is kept in
    its row until it leaves. A policy with ``memory`` keeps a bit per job (``Jobs.mark``, in
    the packed info) and a state per replication (``Queues.memo``) through its ``step``."""
    q, (cls, need, sigma, tau) = st.q, job[:4]
    B = q.s_end.shape[0]
    rows = jnp.arange(B, dtype=jnp.int32)[:, None]
    run = running_of(q.s_info)
    ends = jnp.where(run, q.s_end, jnp.inf)
    # the oldest of the jobs ending first (the rows are in arrival order)
    j, (end, arr_j, info_j, wait_j, size_j) = rows_first(
        (ends,), (ends, q.s_arr, q.s_info, q.s_wait, q.s_size), gather=False
    )
    to_arrival, inside = _clock(ctx, st)
    arrival_next = st.now + to_arrival < end
    blocked = on & arrival_next & (st.count >= B)
    on = on & ~blocked
    leaves, arrives = on & ~arrival_next, on & arrival_next
    now = jnp.where(leaves, end, jnp.where(arrives, st.now + to_arrival, st.now))
    info = _arrival_info(ctx, st, need, cls)
    decided = settle(on, leaves, arrives, now, j, info_j, arr_j, wait_j, size_j)
    on, leaves, arrives, now, j, info_j, arr_j, wait_j, size_j = decided
    someone_waits = st.count > rows_sum(run.astype(jnp.int32), settled=False)
    acc = _integrate(st.acc, st, now - st.now, inside, someone_waits)
    acc = _record_departure(acc, info_j, now - arr_j, leaves, ctx.bins)
    acc = _record_wait(acc, info_j, wait_j, leaves, ctx.bins)
    acc = _record_start(acc, info_j, arr_j, wait_j, size_j, leaves)
    # a completion: the rows behind it move up one; an arrival: row count
    up = leaves[None] & (rows >= j[None])
    hit = arrives[None] & (rows == st.count[None])

    def move(x, new):
        shifted = jnp.concatenate([x[1:], jnp.zeros_like(x[:1])])
        return jnp.where(hit, new[None], jnp.where(up, shifted, x))

    s_end = move(q.s_end, sigma)
    s_arr = move(q.s_arr, now)
    s_info = move(q.s_info, info)
    s_wait = move(q.s_wait, jnp.zeros_like(now))
    size = job[4] if len(job) > 4 else sigma  # a replay's estimate
    s_size = move(q.s_size, size)
    estimate = ctx.layout.estimate
    s_est = None if estimate is None else move(q.s_est, estimate(size))
    count = st.count + arrives - leaves
    # the policy's choice on the job list: starts (end = now + remaining work), preemptions
    old = running_of(s_info)
    jobs = Jobs(
        cls=cls_of(s_info),
        need=need_of(s_info),
        rem=jnp.where(old, s_end - now[None], s_end),
        age=now[None] - s_arr,
        wait=s_wait,
        started=started_of(s_info),
        run=old,
        count=count,
        size=s_size,
        mark=mark_of(s_info),
        estimate=s_est,
    )
    # rows past every replication's count are empty: the policy on the first half of the
    # rows when they hold every job (a pass over the rows costs its rows or their square)
    most = jnp.max(jnp.where(on, count, 0))
    new, mark, memo = lax.cond(
        most <= B // 2, _step_on(ctx, B // 2), _step_on(ctx, B), jobs, q.memo
    )
    new = jnp.where(on[None], new, old)
    new, mark, memo = settle(new, jnp.where(on[None], mark, jobs.mark), jnp.where(on, memo, q.memo))
    s_info = with_mark(s_info, mark)
    start, stop = new & ~old, old & ~new
    first = start & ~started_of(s_info)
    need_rows = need_of(s_info)
    q = q._replace(
        s_end=jnp.where(start, now[None] + s_end, jnp.where(stop, s_end - now[None], s_end)),
        s_arr=s_arr,
        s_info=with_running(jnp.where(start, set_started(s_info), s_info), new),
        s_wait=jnp.where(first, now[None] - s_arr, s_wait),
        s_size=s_size,
        s_est=s_est,
        memo=memo,
        free=ctx.s - rows_sum(jnp.where(new, need_rows, 0), settled=False),
    )
    return _advance(ctx, st, q, acc, now, to_arrival, leaves, arrives, on, tau), blocked


def _step_on(ctx: _Ctx, n: int):
    """The policy's ``step`` on the first ``n`` rows of the job list (the rows after them
    empty): their run and marks, those of the other rows as they were."""

    def step(jobs: Jobs, memo):
        rows = {k: v[:n] for k, v in jobs._asdict().items() if k != "count" and v is not None}
        new, mark, memo = ctx.layout.step(jobs._replace(**rows), ctx.s, ctx.needs, memo)
        rest = lambda x, y: jnp.concatenate([x, y[n:]])  # noqa: E731
        return rest(new, jobs.run), rest(mark, jobs.mark), memo

    return step


def _apply(ctx: _Ctx, st: _State, pk, on):
    """Apply the policy's pick where ``on``; returns the state and where the pick found its
    deque full (then nothing happens: overflow; the pick is made again on resuming)."""
    q, needs, M = st.q, ctx.needs, st.q.s_end.shape[0]
    pk, on = settle(pk, on)
    start, preempt = on & (pk.kind == 1), on & (pk.kind == 2)
    D = q.head.shape[0]
    full = jnp.zeros_like(on)
    if ctx.layout.preemptive:  # slot i back to the front of its need's deque
        hit = _onehot(M, pk.i)
        at = lambda x: rows_sum(jnp.where(hit, x, jnp.zeros((), x.dtype)))  # noqa: E731
        info_i = at(q.s_info)
        d_pre = _deque_of(need_of(info_i), needs)
        full = preempt & (rows_sum(jnp.where(_onehot(D, d_pre), q.size, 0)) >= q.capacity)
        preempt = preempt & ~full
        item = (at(q.s_arr), at(q.s_end) - st.now, info_i)
        start, preempt, item, d_pre = settle(start, preempt, item, d_pre)
        q = _vacate(q, pk.i, preempt, ctx.layout.sorted_slots)
        q = q._replace(
            free=q.free + jnp.where(preempt, need_of(info_i), 0),
            busy=q.busy - (_onehot(D, d_pre) & preempt[None]),
        )
        q = _push(q, d_pre, item, preempt, front=True)  # older than its deque's jobs
    # start: into service (there is an empty slot: the job fits)
    q, (a, r, info, *est) = _take(q, pk.d, pk.p, start, ctx.layout.inside)
    q = _refill(q, pk.d, start, ctx.layout.inside)
    if pk.mark is not None:
        info = with_mark(info, pk.mark)
    more = None
    if ctx.layout.sorted_slots:  # its row: after the jobs ending before it (or with it and
        # arrived first; a sum over the rows, settled after the values it compares)
        start, a, end, info = settle(start, a, st.now + r, info)
        before = (q.s_end < end[None]) | ((q.s_end == end[None]) & (q.s_arr < a[None]))
        slot = rows_sum(before.astype(jnp.int32))
    elif ctx.layout.estimated:  # its row: after the jobs of earlier estimated ends (start
        # plus estimate), or of the same and arrived first
        start, a, r, end, info, est = settle(start, a, r, st.now + r, info, est[0])
        key, ends = st.now + est, q.s_start + q.s_est
        before = (ends < key[None]) | ((ends == key[None]) & (q.s_arr < a[None]))
        slot = rows_sum(before.astype(jnp.int32))
        more = {"s_est": est, "s_start": st.now}
    else:  # the first empty slot
        empty = jnp.where(q.s_info == 0, jnp.arange(M, dtype=jnp.int32)[:, None], M)
        slot = rows_min(empty, settled=False)
        slot, start, a, end, info = settle(slot, start, a, st.now + r, info)
    first = start & ~started_of(info)
    wait = st.now - a if ctx.layout.slot_waits else None  # summed at its departure
    shifts = ctx.layout.sorted_slots or ctx.layout.estimated
    q = _occupy(q, slot, (end, a, set_started(info)), start, shifts, wait, more)
    q = q._replace(free=q.free - jnp.where(start, need_of(info), 0))
    if ctx.layout.per_need:
        q = q._replace(busy=q.busy + (_onehot(D, pk.d) & start[None]))
    elif ctx.layout.classes:  # the servers of its partition (none on the helpers)
        own = _onehot(D, pk.d) & (start & ~pk.mark)[None]
        q = q._replace(busy=q.busy + jnp.where(own, need_of(info)[None], 0))
    acc = (
        st.acc if ctx.layout.slot_waits else _record_wait(st.acc, info, st.now - a, first, ctx.bins)
    )
    acc = _record_start(acc, info, a, st.now - a, r, first)
    return st._replace(q=q, acc=acc), full


def _round(ctx: _Ctx, st: _State, active, job) -> _State:
    """One round of every ``active`` replication: its next event unless a pick is pending,
    then the policy's next pick at the new instant. ``job``: job ``n_next`` of every
    replication (:func:`_job_at`)."""
    old = st
    if ctx.layout.all_rows or ctx.layout.rows:  # the policy chooses the set in service
        event = _event_all if ctx.layout.all_rows else _event_rows
        st, blocked = event(ctx, st, active, job)
        st = st._replace(overflow=st.overflow | blocked)
        return jax.tree.map(lambda x, y: x.astype(y.dtype), st, old)
    st, blocked = _event(ctx, st, active & ~st.pending, job)
    go = active & ~blocked
    pk = ctx.layout.pick(st.q, ctx.s, ctx.needs, st.now)
    st, full = _apply(ctx, st, pk, go)
    picked = go & (pk.kind > 0)
    pending = jnp.where(go, (picked & pk.more) | full, st.pending)
    st = st._replace(pending=pending, overflow=st.overflow | blocked | full)
    return jax.tree.map(lambda x, y: x.astype(y.dtype), st, old)  # sums of int32 are int64


def _rebase(st: _State) -> _State:
    """Arrival and end times relative to the clock (the epoch moves to now; the prefix rows
    not in service hold remaining work, not an end time)."""
    q, now = st.q, st.now
    D, R = q.head.shape
    b = q.body.reshape(D, q.capacity, R, q.width)
    b = b.at[..., 0].add(-now)
    rows = q.s_before.shape[0] > 0 or q.all_rows  # remaining work where not in service
    shift = jnp.where(running_of(q.s_info), now, 0) if rows else now
    q = q._replace(
        s_end=q.s_end - shift, s_arr=q.s_arr - now, f_arr=q.f_arr - now, body=b.reshape(-1)
    )
    if q.s_start is not None:  # estimated ends
        q = q._replace(s_start=q.s_start - now)
    return st._replace(q=q, now=jnp.zeros_like(now))
