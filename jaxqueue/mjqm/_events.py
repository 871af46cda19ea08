"""The event engine: batched event simulation of the MJQM under any job-list policy.

All replications advance together in one ``lax.while_loop`` of rounds, on arrays with the
replications on the last axis, sharded over devices on that axis like the forward scan. The
jobs are kept as ``policies._queues`` describes: the jobs in service in ``M = s // min(need)``
slots (absolute end time, arrival time, packed class / need / flags; for easy-backfilling
sorted by end time, so the next completion is the first row), the waiting jobs in ring-buffer
deques of ``B`` entries (one FIFO, or one per need) whose fronts are also kept in registers;
server-filling's first ``W`` jobs in ``W`` rows and the rest in one FIFO (the ``"window"``
layout: its policy chooses the rows in service at every event, no picks). A round of a
replication is its next event (an arrival or a completion, whichever comes first; skipped while
a pick is pending) followed by one *pick* of the policy (start a waiting job, preempt one in
service, ...) at the new instant; picks repeat, one per round, until the policy names none. An
event touches one slot and one deque entry, so a round costs the same whatever the queue length
(the former engine shifted and scanned a buffer of every job at every event). Arrivals are
drawn from the counter-based inputs of ``_inputs.py`` (job ``n`` of replication ``r`` is the
same job as in the MJSRE simulators), a block of the next ``_CHUNK`` jobs of every replication
per chunk of ``_CHUNK`` rounds. A round costs the same for every replication of the batch,
finished or not, and the loop runs until the slowest finishes: once no more than ``1 / _TAIL``
of them are active, they go on in a batch of that size.

What a round costs on XLA:CPU (profiled per thunk, 1024 replications): XLA fuses the
per-replication decisions of a round (``(R,)`` masks, slot indices, times: tens of operations)
into every ``(slots, R)`` update and recomputes them for each element, 20-140 us per such
fusion; ``policies._queues.settle`` computes them once (each decision point materialised),
and the reductions over the slots are trees of elementwise operations (``rows_min``,
``rows_first``), cheaper than XLA's reduce there. XLA:CPU splits a fusion over two threads
when its cost model finds more arithmetic than memory traffic and enough of both (at 1024
replications about 200 operations per replication, a memory byte counting 10), or when it
touches more than 512 KB (the gathers and scatters of a deque body): each split costs a
thread hand-off, 10-40 us on a busy 2-core machine, so the per-round decisions are kept in
int32 and cheap (the job draw, the class choice: once per chunk, :func:`_draw`). On one
device XLA:CPU's thunk executor also hands independent thunks of a round to the second core
(with one thread, ``NPROC=1``, server-filling's round at 512 replications took 115 us instead
of 149, fcfs's 45 instead of 63); with two host devices each kernel has a core and runs its
thunks in turn. Then a round's time is its thunks (server-filling about 320, each a
settle loop's or an ``(R,)`` or ``(slots, R)`` fusion of 1-10 us). easy-backfilling keeps
its first 16 waiting jobs in registers and the rest in the deque body, which a round touches
only where some replication needs it (:func:`_once`; its pick's pass over the body, ``Q x R``
entries at about 1 ns each, ran in 13% of the rounds at 512 replications, where it had been
40% of every round).

float64 runs keep absolute times, as the heapq reference does; float32 runs move the epoch to
the clock every ``_REBASE`` chunks, so they do not lose digits as the clock grows.

Measured: the jobs ``warmup .. n_jobs - 1`` of each replication, until every one of them has
left (arrivals go on meanwhile); time averages over the arrivals of those jobs. An arrival (or
a preemption) that finds its deque full is an overflow (never used silently): the replications
that overflowed go on from there with twice the entries, up to ``max_buffer``, and beyond it
the status is ``overflow``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, PRNGKeyArray

from .._sharding import BATCH, batch_devices, batch_mesh, shard_batch, to_host
from ..stats import Estimate, Result, Status, drift
from ._forward import (
    MIN_EFFECTIVE,
    MIN_REPLICATIONS,
    _effective_jobs,
    _histogram,
    _quantile_from_hist,
    _ratio_ci,
    few_replications_reason,
)
from ._inputs import (
    _bits_to_uniform,
    _jobs_from_rows,
    n_uniforms,
    replication_keypairs,
    threefry2x32,
)
from ._workload import Workload
from .policies import Policy, parse_policy
from .policies._queues import (
    Queues,
    cls_of,
    code_of,
    decode,
    encode,
    need_of,
    pack,
    rows_any,
    rows_first,
    rows_min,
    rows_sum,
    running_of,
    set_started,
    settle,
    settling,
    started_of,
    with_running,
)

__all__ = ["PolicyResult", "simulate_policy", "saturated_throughput"]


class _Acc(NamedTuple):
    """Per-replication sums: per class ``(K,)`` response, response^2, wait, wait^2, count;
    second-half response and count (drift check); time integrals of jobs, idle servers, idle
    servers while someone waits, and the window length; departures (saturated runs); the
    waiting-time histogram, ``(K * n_bins,)`` counts (class-major, :func:`_wait_bins`)."""

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
    window=False,
) -> _State:
    """``R`` empty replications of ``s`` servers: ``M`` service slots (with ``window``, the
    rows of the window layout), ``D`` deques of ``Q`` entries (``F`` front registers: one per
    deque, or the first ``F`` entries of a single FIFO); ``K`` classes, ``n_bins``
    waiting-time bins per class."""
    f = lambda *shape: jnp.zeros((*shape, R), dt)  # noqa: E731
    i = lambda *shape: jnp.zeros((*shape, R), jnp.int32)  # noqa: E731
    q = Queues(
        s_end=jnp.full((M, R), jnp.inf, dt),
        s_arr=f(M),
        s_info=i(M),
        f_arr=f(max(D, F)),
        f_rem=f(max(D, F)),
        f_info=i(max(D, F)),
        body=jnp.zeros(D * Q * R * 3, dt),
        head=i(D),
        size=i(D),
        busy=i(D),
        free=jnp.full(R, s, jnp.int32),
        s_wait=f(M if window else 0),
        s_before=i(M if window else 0),
        s_rank=i(M if window else 0),
    )
    acc = _Acc(f(K), f(K), f(K), f(K), f(K), f(), f(), f(), f(), f(), f(), f(), i(K * n_bins))
    return _State(q, f(), f(), i(), i(), i().astype(bool), acc, i().astype(bool), i())


def _layout(policy: Policy, needs: tuple[int, ...]) -> int:
    """Number of deques of the policy's layout (``_queues`` module docstring)."""
    return {"fifo": 1, "need": len(needs), "window": 1}[policy.layout]


def _deque_of(need, needs):
    """The per-need deque of ``need`` (``needs`` largest first; int32 throughout: Python ints
    are int64 under x64)."""
    i32 = jnp.int32
    return sum((jnp.where(need == v, i32(k), i32(0)) for k, v in enumerate(needs)), i32(0))


def _entry(q: Queues, d, r):
    """Entry number ``(R,)`` of entry ``r`` (ring index) of deque ``d`` in ``q.body``
    (``(D, Q, R, 3)``: the three fields of an entry side by side)."""
    R = q.free.shape[0]
    return (d * q.capacity + r) * R + jnp.arange(R, dtype=r.dtype)


def _read(q: Queues, d, r):
    """``(arr, rem, info)`` of entry ``r`` of deque ``d``: one gather of a row of three per
    replication (``q.body`` seen as ``(D Q R, 3)``)."""
    x = q.body.reshape(-1, 3).at[_entry(q, d, r)].get(mode="promise_in_bounds")
    return x[:, 0], x[:, 1], decode(x[:, 2])


def _onehot(n: int, d):
    return jnp.arange(n, dtype=jnp.int32)[:, None] == d[None]


def _push(q: Queues, d, item, on, front=False, apart=False) -> Queues:
    """Add a job ``(arr, rem, info)`` at the back (an arrival) or, where ``front`` (a mask or
    ``True``), at the front (a preempted job: older than every waiting job of its need) of
    deque ``d`` where ``on`` (one scatter; the front registers follow). ``apart``: the body
    holds only the jobs behind the front registers (:func:`_take_inside`), written where the
    job goes there (:func:`_once`)."""
    Q, D = q.capacity, q.head.shape[0]
    hit = _onehot(D, d) & on[None]
    head = rows_sum(jnp.where(hit, q.head, 0))
    size = rows_sum(jnp.where(hit, q.size, 0))
    r = jnp.where(front, (head - 1) % Q, (head + size) % Q)
    e = jnp.where(on, _entry(q, d, r), q.body.shape[0] // 3)  # past the end: dropped
    arr, rem, info = item
    vals = jnp.stack([arr, rem, encode(info, arr.dtype)], axis=1)
    F = q.f_arr.shape[0]
    if apart:
        e = jnp.where(size >= F, e, q.body.shape[0] // 3)
    e, vals, hit, r, size = settle(e, vals, hit, r, size)

    def write(body, e, vals):
        return body.reshape(-1, 3).at[e].set(vals, mode="drop", unique_indices=True).reshape(-1)

    if apart:
        body = _once(jnp.any(on & (size >= F)), write, q.body, e, vals)
    else:
        body = write(q.body, e, vals)
    if F > D:  # one FIFO whose first F entries are in the registers: row `size` if free
        new_front = _onehot(F, size) & on[None]
    else:
        new_front = hit & ((size == 0) | front)[None]
    return q._replace(
        body=body,
        head=jnp.where(hit & front, r[None], q.head),
        size=q.size + hit,
        f_arr=jnp.where(new_front, arr[None], q.f_arr),
        f_rem=jnp.where(new_front, rem[None], q.f_rem),
        f_info=jnp.where(new_front, info[None], q.f_info),
    )


def _take(q: Queues, d, p, on, inside: bool) -> tuple[Queues, tuple]:
    """Remove position ``p`` of deque ``d`` where ``on`` and return it; ``inside``: ``p`` may
    be past the front (FIFO layout only, :func:`_take_inside`), else it is the front (from
    the registers), or with ``F > 1`` front registers (one FIFO) one of the first ``F``
    positions (:func:`_take_registered`). The new front is loaded by :func:`_refill` after
    every write of the round (a gather before a scatter of the same buffer made XLA copy the
    whole buffer)."""
    Q, D = q.capacity, q.head.shape[0]
    if q.f_arr.shape[0] > D and not inside:
        return _take_registered(q, p, on)
    hit = _onehot(D, d) & on[None]
    pick = lambda x: rows_sum(jnp.where(_onehot(D, d), x, 0))  # noqa: E731
    head = pick(q.head)
    if inside:
        return _take_inside(q, p, on)
    else:
        item = (pick(q.f_arr), pick(q.f_rem), pick(q.f_info))
    q = q._replace(head=jnp.where(hit, ((head + 1) % Q)[None], q.head), size=q.size - hit)
    return q, item


def _take_inside(q: Queues, p, on) -> tuple[Queues, tuple]:
    """:func:`_take` of any position ``p`` of a single FIFO whose first ``F`` waiting jobs
    are in the front registers and the rest in the body (``picks_inside`` policies: position
    ``k >= F`` is ring entry ``head + k``; the entries ``head .. head + F - 1`` are unused).
    A registered job: the rows behind it move one up (the last is loaded by :func:`_refill`)
    and the head one on. A job in the body (rare): the entries of positions ``F .. p - 1``
    move one entry on, and the head with them (:func:`_move_on`); the FIFO has no holes."""
    Q, F = q.capacity, q.f_arr.shape[0]
    rows = jnp.arange(F, dtype=jnp.int32)[:, None]
    at = lambda x: rows_sum(jnp.where(rows == p[None], x, 0), settled=False)  # noqa: E731
    item = (at(q.f_arr), at(q.f_rem), at(q.f_info))  # (settled by _apply)
    reg, inside = on & (p < F), on & (p >= F)
    up = reg[None] & (rows[:-1] >= p[None])
    shift = lambda x: jnp.concatenate([jnp.where(up, x[1:], x[:-1]), x[-1:]])  # noqa: E731
    q2 = q._replace(f_arr=shift(q.f_arr), f_rem=shift(q.f_rem), f_info=shift(q.f_info))
    body, got = _move_on(q, jnp.where(inside, p - F + 1, 0))
    item = tuple(jnp.where(inside, b, a) for a, b in zip(item, got, strict=True))
    head = jnp.where(on, (q.head[0] + 1) % Q, q.head[0])
    return q2._replace(body=body, head=head[None], size=q.size - on[None]), item


def _move_on(q: Queues, n):
    """Take position ``p = F + n - 1`` of the body of :func:`_take_inside` where ``n > 0``:
    its job, and the body with entries ``head + F - 1 .. head + p - 1`` moved one entry on,
    the last register's job written first (entry ``head + F - 1`` is then position ``F - 1``
    of the FIFO once the head moves on, which :func:`_refill` loads again), one entry per
    replication per step of a ``while_loop`` (``max(n)`` steps, none in most rounds; a dense
    rewrite of the whole body under a ``lax.cond`` took 1 ms, and the ``cond`` copied the
    body)."""
    Q, F, R = q.capacity, q.f_arr.shape[0], q.free.shape[0]
    head = q.head[0]
    last = jnp.stack([q.f_arr[-1], q.f_rem[-1], encode(q.f_info[-1], q.body.dtype)], axis=-1)
    reps = jnp.arange(R, dtype=jnp.int32)
    past = q.body.shape[0] // 3  # an entry past the end: the scatter drops it

    def step(c):
        k, body, item = c
        body = body.reshape(-1, 3)
        # entry head + F - 1 + n - k takes that before it (the last register's, the last step)
        to = (head + F - 1 + n - k) % Q * R + reps
        src = body.at[(to - R) % (Q * R)].get(mode="promise_in_bounds")
        src = jnp.where((k < n - 1)[:, None], src, last)
        item = jnp.where((k == 0)[:, None], body.at[to].get(mode="promise_in_bounds"), item)
        to, src, item = settle(to, src, item)
        body = body.at[jnp.where(k < n, to, past)].set(src, mode="drop", unique_indices=True)
        return k + 1, body.reshape(-1), item

    zero = jnp.zeros((R, 3), q.body.dtype)
    k = jnp.zeros_like(n)
    _, body, x = lax.while_loop(lambda c: jnp.any(c[0] < n), step, (k, q.body, zero))
    return body, (x[:, 0], x[:, 1], decode(x[:, 2]))


def _take_registered(q: Queues, p, on) -> tuple[Queues, tuple]:
    """:func:`_take` of position ``p < F`` of a single FIFO with ``F`` front registers (which
    mirror its first ``F`` entries; the body holds them all): the item from the registers;
    in the body the entries before ``p`` move one step back (a scatter of at most ``F - 1``
    entries, whose values are in the registers) and the head one step on, not a roll of the
    whole deque; the registers behind ``p`` move one row up (the last is loaded by
    :func:`_refill`)."""
    Q, F = q.capacity, q.f_arr.shape[0]
    rows = jnp.arange(F, dtype=jnp.int32)[:, None]
    item = tuple(rows_sum(jnp.where(rows == p[None], x, 0)) for x in (q.f_arr, q.f_rem, q.f_info))
    head = q.head[0]
    if F > 1:
        k = jnp.arange(F - 1, dtype=jnp.int32)[:, None]  # position k < p: ring entry head + k + 1
        e = _entry(q, 0, (head[None] + k + 1) % Q)
        e = jnp.where(on[None] & (k < p[None]), e, q.body.shape[0] // 3)  # past the end: dropped
        vals = jnp.stack([q.f_arr[:-1], q.f_rem[:-1], encode(q.f_info[:-1], q.f_arr.dtype)], -1)
        e, vals = settle(e, vals)
        body = q.body.reshape(-1, 3).at[e].set(vals, mode="drop", unique_indices=True)
        body = body.reshape(-1)
        up = on[None] & (rows[:-1] >= p[None])
        shift = lambda x: jnp.concatenate([jnp.where(up, x[1:], x[:-1]), x[-1:]])  # noqa: E731
        q = q._replace(body=body, f_arr=shift(q.f_arr), f_rem=shift(q.f_rem))
        q = q._replace(f_info=shift(q.f_info))
    q = q._replace(head=jnp.where(on, (head + 1) % Q, head)[None], size=q.size - on[None])
    return q, item


def _refill(q: Queues, d, on, apart=False) -> Queues:
    """Load the front registers of deque ``d`` from its body where ``on`` (one gather); with
    ``F > 1`` registers of one FIFO, the last (position ``F - 1``); ``apart`` (the body holds
    only the jobs behind the registers: :func:`_take_inside`) only where it has one, in a
    :func:`_once`."""
    F = q.f_arr.shape[0]
    if F > q.head.shape[0]:
        r = (q.head[0] + F - 1) % q.capacity

        def load(regs, r, on):
            nxt = _read(q, jnp.zeros_like(r), r)
            last = (jnp.arange(F)[:, None] == F - 1) & on[None]
            return tuple(jnp.where(last, x[None], f) for x, f in zip(nxt, regs, strict=True))

        regs = (q.f_arr, q.f_rem, q.f_info)
        if apart:
            on = on & (q.size[0] >= F)
            regs = _once(jnp.any(on), load, regs, r, on)
        else:
            regs = load(regs, r, on)
        return q._replace(f_arr=regs[0], f_rem=regs[1], f_info=regs[2])
    hit = _onehot(q.head.shape[0], d) & on[None]
    r = rows_sum(jnp.where(_onehot(q.head.shape[0], d), q.head, 0))
    nxt = _read(q, d, r)  # a gather, its index computed inside (a few operations)
    return q._replace(
        f_arr=jnp.where(hit, nxt[0][None], q.f_arr),
        f_rem=jnp.where(hit, nxt[1][None], q.f_rem),
        f_info=jnp.where(hit, nxt[2][None], q.f_info),
    )


def _once(c, f, x, *args):
    """``f(x, *args)`` if ``c``, else ``x``: a ``while_loop`` that runs once or not at all, for
    work on the deque body that few rounds need: XLA:CPU splits a gather or scatter on a body
    of more than 512 KB over two threads (a thread hand-off every round), and a ``lax.cond``
    copied the body into and out of its branches. ``args`` pass through the loop's counter (a
    select on it): else XLA hoists the work on them out of the loop."""

    def step(c):
        k, x = c
        fresh = jax.tree.map(lambda a: jnp.where(k == 0, a, jnp.zeros_like(a)), args)
        return k + 1, f(x, *fresh)

    n = c.astype(jnp.int32)
    return lax.while_loop(lambda c: c[0] < n, step, (jnp.int32(0), x))[1]


def _record_departure(acc: _Acc, info, resp, on) -> _Acc:
    """Add the response of a departing job where ``on`` and it is a measured one."""
    c = code_of(info)
    dt = acc.resp.dtype
    one = (_onehot(acc.resp.shape[0], cls_of(info)) & ((c > 0) & on)[None]).astype(dt)
    late = on & (c == 2)
    return acc._replace(
        resp=acc.resp + one * resp,
        resp2=acc.resp2 + one * (resp * resp),
        cnt=acc.cnt + one,
        late_resp=acc.late_resp + jnp.where(late, resp, 0),
        late_cnt=acc.late_cnt + late,
        done=acc.done + on,
    )


_BINS_PER_OCTAVE = 16  # waiting-time histogram resolution: the forward scan's default


def _wait_bins(workload: Workload):
    """The waiting-time histogram of the forward scan (``_forward._histogram``: bin 0 the atom
    at 0, then log-spaced bins from the float32 bits of the wait): ``(n_bins, shift, lo_code,
    edges)``."""
    return _histogram(workload, None, _BINS_PER_OCTAVE)


def _record_wait(acc: _Acc, info, wait, on, bins) -> _Acc:
    """Add the wait of a job starting for the first time where ``on`` and it is measured (at
    its start: every measured job starts before the run ends), to the sums and, if it waited,
    to its class's histogram (``bins``: ``(n_bins, shift, lo_code)``, binned as the forward
    scan bins; one scatter-add into the ``(K * n_bins, R)`` counts, 15% of an fcfs round with
    every wait; bin 0, no wait, is the rest of the class's count: :func:`_summarise`)."""
    dt = acc.wait.dtype
    measured = (code_of(info) > 0) & on
    one = (_onehot(acc.wait.shape[0], cls_of(info)) & measured[None]).astype(dt)
    n_bins, shift, lo_code = bins
    code = lax.bitcast_convert_type(wait.astype(jnp.float32), jnp.int32) >> shift
    b = jnp.where(wait > 0, jnp.clip(code - lo_code + 2, 1, n_bins - 1), 0)
    R = wait.shape[0]
    row = cls_of(info) * n_bins + b
    waited = measured & (wait > 0)
    idx = jnp.where(waited, row * R + jnp.arange(R, dtype=jnp.int32), acc.hist.size)
    hist = lax.scatter_add(  # int32 indices, those out of range dropped
        acc.hist.reshape(-1),
        idx[:, None],
        jnp.ones(R, acc.hist.dtype),
        lax.ScatterDimensionNumbers((), (0,), (0,)),
        unique_indices=True,
        mode=lax.GatherScatterMode.FILL_OR_DROP,
    )
    return acc._replace(
        wait=acc.wait + one * wait,
        wait2=acc.wait2 + one * (wait * wait),
        hist=hist.reshape(acc.hist.shape),
    )


def _integrate(acc: _Acc, st: _State, dt, inside, someone_waits) -> _Acc:
    """Time integrals over ``dt`` where ``inside`` the measuring window."""
    d = jnp.where(inside, dt, 0)
    idle = st.q.free.astype(dt.dtype)
    return acc._replace(
        area_jobs=acc.area_jobs + d * st.count,
        area_idle=acc.area_idle + d * idle,
        area_hol=acc.area_hol + d * idle * someone_waits,
        time=acc.time + d,
    )


class _Ctx(NamedTuple):
    """Static facts of a run: the policy, servers, distinct needs (largest first), whether the
    system is saturated, the buffer, and the measured jobs ``warmup .. n_jobs - 1``."""

    policy: Policy
    s: int
    needs: tuple
    saturated: bool
    B: int
    warmup: Array
    n_jobs: Array
    bins: tuple  # (n_bins, shift, lo_code) of the waiting-time histogram


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
    q, (cls, need, sigma, tau) = st.q, job
    # the oldest of the jobs ending first: its end, arrival, slot and info
    if ctx.policy.sorted_slots:  # the first row
        end, arr_j, info_j = q.s_end[0], q.s_arr[0], q.s_info[0]
        j = jnp.zeros_like(info_j)
    else:
        ids = jnp.broadcast_to(
            jnp.arange(q.s_end.shape[0], dtype=jnp.int32)[:, None], q.s_info.shape
        )
        end, arr_j, j, info_j = rows_first((q.s_end, q.s_arr), (q.s_end, q.s_arr, ids, q.s_info))
    to_arrival, inside = _clock(ctx, st)
    d_new = _deque_of(need, ctx.needs) if ctx.policy.layout != "fifo" else jnp.zeros_like(need)
    arrival_next = st.now + to_arrival < end
    full = rows_sum(jnp.where(_onehot(q.head.shape[0], d_new), q.size, 0)) >= q.capacity
    blocked = on & arrival_next & full
    on = on & ~blocked
    leaves, arrives = on & ~arrival_next, on & arrival_next
    now = jnp.where(leaves, end, jnp.where(arrives, st.now + to_arrival, st.now))
    d_j = _deque_of(need_of(info_j), ctx.needs)  # the per-need deque of the leaving job
    on, leaves, arrives, now, j, info_j, arr_j, d_new, d_j = settle(
        on, leaves, arrives, now, j, info_j, arr_j, d_new, d_j
    )
    acc = _integrate(st.acc, st, now - st.now, inside, rows_any(q.size > 0))
    # a completion: its slot empties
    acc = _record_departure(acc, info_j, now - arr_j, leaves)
    need_j = jnp.where(leaves, need_of(info_j), 0)
    q = _vacate(q, j, leaves, ctx.policy.sorted_slots)
    q = q._replace(free=q.free + need_j)
    if ctx.policy.layout != "fifo":  # (no policy of one FIFO reads the counts)
        q = q._replace(busy=q.busy - (_onehot(q.head.shape[0], d_j) & leaves[None]))
    # an arrival: job n_next at the back of its deque
    info = _arrival_info(ctx, st, need, cls)
    q = _push(q, d_new, (now, sigma, info), arrives, apart=ctx.policy.picks_inside)
    return _advance(ctx, st, q, acc, now, to_arrival, leaves, arrives, on, tau), blocked


def _event_window(ctx: _Ctx, st: _State, on, job):
    """:func:`_event` and the policy's choice of the jobs in service for a ``"window"``
    layout policy (``WindowPolicy.serve``): the first ``W`` jobs in the system sit in ``W``
    unordered rows (``s_end``: absolute end time in service, else the remaining work;
    ``s_before``: the needs of the jobs ahead of it in arrival order, ``s_rank``: 1 + the jobs
    of its need ahead of it, both kept up to date as jobs leave, so no pass orders the rows),
    the rest in one FIFO. A completion empties its row and the front of the FIFO takes it; an
    arrival takes an empty row, or waits in the FIFO. Then the policy chooses the rows in
    service afresh (preempt-resume) and the wait of a job is kept in its row until it
    leaves."""
    q, (cls, need, sigma, tau) = st.q, job
    W = q.s_end.shape[0]
    rows = jnp.arange(W, dtype=jnp.int32)[:, None]
    ids = jnp.broadcast_to(rows, q.s_info.shape)
    run, need_rows = running_of(q.s_info), need_of(q.s_info)
    ends = jnp.where(run, q.s_end, jnp.inf)
    # the oldest of the jobs ending first (``s_before`` orders the rows by arrival)
    end, j, arr_j, info_j, wait_j, before_j = rows_first(
        (ends, q.s_before), (ends, ids, q.s_arr, q.s_info, q.s_wait, q.s_before)
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
    acc = _record_departure(acc, info_j, now - arr_j, leaves)
    acc = _record_wait(acc, info_j, wait_j, leaves, ctx.bins)
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
    new = ctx.policy.serve(need_rows, before, rank, ctx.s, ctx.needs)
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


def _apply(ctx: _Ctx, st: _State, pk, on):
    """Apply the policy's pick where ``on``; returns the state and where the pick found its
    deque full (then nothing happens: overflow; the pick is made again on resuming)."""
    q, needs, M = st.q, ctx.needs, st.q.s_end.shape[0]
    pk, on = settle(pk, on)
    start, preempt = on & (pk.kind == 1), on & (pk.kind == 2)
    D = q.head.shape[0]
    full = jnp.zeros_like(on)
    if ctx.policy.preemptive:  # slot i back to the front of its need's deque
        hit = _onehot(M, pk.i)
        at = lambda x: rows_sum(jnp.where(hit, x, jnp.zeros((), x.dtype)))  # noqa: E731
        info_i = at(q.s_info)
        d_pre = _deque_of(need_of(info_i), needs)
        full = preempt & (rows_sum(jnp.where(_onehot(D, d_pre), q.size, 0)) >= q.capacity)
        preempt = preempt & ~full
        item = (at(q.s_arr), at(q.s_end) - st.now, info_i)
        start, preempt, item, d_pre = settle(start, preempt, item, d_pre)
        q = _vacate(q, pk.i, preempt, ctx.policy.sorted_slots)
        q = q._replace(
            free=q.free + jnp.where(preempt, need_of(info_i), 0),
            busy=q.busy - (_onehot(D, d_pre) & preempt[None]),
        )
        q = _push(q, d_pre, item, preempt, front=True)  # older than its deque's jobs
    # start: into service (there is an empty slot: the job fits)
    q, (a, r, info) = _take(q, pk.d, pk.p, start, ctx.policy.picks_inside)
    q = _refill(q, pk.d, start, ctx.policy.picks_inside)
    if ctx.policy.sorted_slots:  # its row: after the jobs ending before it (or with it and
        # arrived first; a sum over the rows, settled after the values it compares)
        start, a, end, info = settle(start, a, st.now + r, info)
        before = (q.s_end < end[None]) | ((q.s_end == end[None]) & (q.s_arr < a[None]))
        slot = rows_sum(before.astype(jnp.int32))
    else:  # the first empty slot
        empty = jnp.where(q.s_info == 0, jnp.arange(M, dtype=jnp.int32)[:, None], M)
        slot = rows_min(empty, settled=False)
        slot, start, a, end, info = settle(slot, start, a, st.now + r, info)
    first = start & ~started_of(info)
    q = _occupy(q, slot, (end, a, set_started(info)), start, ctx.policy.sorted_slots)
    q = q._replace(free=q.free - jnp.where(start, need_of(info), 0))
    if ctx.policy.layout != "fifo":
        q = q._replace(busy=q.busy + (_onehot(D, pk.d) & start[None]))
    acc = _record_wait(st.acc, info, st.now - a, first, ctx.bins)
    return st._replace(q=q, acc=acc), full


def _vacate(q: Queues, i, on, sorted_slots: bool) -> Queues:
    """The job in service in slot ``i`` leaves where ``on``: its slot empties, or with
    ``sorted_slots`` (``Policy.sorted_slots``) the rows after it move one up and the
    last row empties."""
    rows = jnp.arange(q.s_end.shape[0], dtype=jnp.int32)[:, None]
    if not sorted_slots:
        gone = (rows == i[None]) & on[None]
        return q._replace(
            s_end=jnp.where(gone, jnp.inf, q.s_end), s_info=jnp.where(gone, 0, q.s_info)
        )
    up = (rows >= i[None]) & on[None]

    def shift(x, empty):
        return jnp.where(up, jnp.concatenate([x[1:], jnp.full_like(x[:1], empty)]), x)

    return q._replace(
        s_end=shift(q.s_end, jnp.inf), s_arr=shift(q.s_arr, 0), s_info=shift(q.s_info, 0)
    )


def _occupy(q: Queues, slot, job, on, sorted_slots: bool) -> Queues:
    """Job ``(end, arrival, info)`` into service in slot ``slot`` where ``on``: an empty
    one, or with ``sorted_slots`` its row in the order, the rows from it on one down (the
    last is empty: the job fits)."""
    end, arr, info = job
    rows = jnp.arange(q.s_end.shape[0], dtype=jnp.int32)[:, None]
    at = (rows == slot[None]) & on[None]
    down = (rows > slot[None]) & on[None] if sorted_slots else jnp.zeros((), bool)

    def put(x, new):
        return jnp.where(at, new[None], jnp.where(down, jnp.concatenate([x[:1], x[:-1]]), x))

    return q._replace(s_end=put(q.s_end, end), s_arr=put(q.s_arr, arr), s_info=put(q.s_info, info))


def _round(ctx: _Ctx, st: _State, active, job) -> _State:
    """One round of every ``active`` replication: its next event unless a pick is pending,
    then the policy's next pick at the new instant. ``job``: job ``n_next`` of every
    replication (:func:`_job_at`)."""
    old = st
    if ctx.policy.layout == "window":  # the policy chooses the set in service at the event
        st, blocked = _event_window(ctx, st, active, job)
        st = st._replace(overflow=st.overflow | blocked)
        return jax.tree.map(lambda x, y: x.astype(y.dtype), st, old)
    st, blocked = _event(ctx, st, active & ~st.pending, job)
    go = active & ~blocked
    pk = ctx.policy.pick(st.q, ctx.s, ctx.needs, st.now)
    st, full = _apply(ctx, st, pk, go)
    picked = go & (pk.kind > 0)
    pending = jnp.where(go, (picked & pk.more) | full, st.pending)
    st = st._replace(pending=pending, overflow=st.overflow | blocked | full)
    return jax.tree.map(lambda x, y: x.astype(y.dtype), st, old)  # sums of int32 are int64


def _rebase(st: _State) -> _State:
    """Arrival and end times relative to the clock (the epoch moves to now; the rows of the
    ``"window"`` layout not in service hold remaining work, not an end time)."""
    q, now = st.q, st.now
    D, R = q.head.shape
    b = q.body.reshape(D, q.capacity, R, 3)
    b = b.at[..., 0].add(-now)
    shift = now if q.s_wait.shape[0] == 0 else jnp.where(running_of(q.s_info), now, 0)
    q = q._replace(
        s_end=q.s_end - shift, s_arr=q.s_arr - now, f_arr=q.f_arr - now, body=b.reshape(-1)
    )
    return st._replace(q=q, now=jnp.zeros_like(now))


_CHUNK = 32  # rounds per check of the loop condition
_TAIL = 8  # the last 1/_TAIL of the replications to finish run on in a batch that small ...
_TAIL_MIN = 256  # ... in batches of at least this many replications (per device)
_REBASE = 16  # chunks between moves of the epoch (float32 only)


def _draw(workload, lam, keypairs, dtype):
    """``draw(n)``: the block of jobs ``n[r] .. n[r] + _CHUNK - 1`` of every replication ``r``
    from the counter-based inputs, ``(4, _CHUNK, R)``: class, need, service, inter-arrival time
    (all in ``dtype``; class and need are small integers, exact). A chunk of ``_CHUNK`` rounds
    takes at most ``_CHUNK`` arrivals, so one block per chunk serves them all. Drawn per round
    (the next job of every replication, every round), the cipher and the class choice were
    fusions of ``R`` values that XLA:CPU's cost model splits over two threads (more arithmetic
    than memory traffic), 10-15 us of thread hand-off each per round at 1024 replications; the
    block is the same arithmetic in large fusions once per chunk, and a round reads its job
    with one gather (:func:`_job_at`)."""

    k0, k1 = keypairs
    n_u = n_uniforms(workload)

    def draw(n):
        x0 = (n[None] + jnp.arange(_CHUNK, dtype=n.dtype)[:, None]).astype(jnp.uint32)
        words = [threefry2x32(k0, k1, x0, jnp.full_like(x0, c)) for c in range((n_u + 1) // 2)]
        # the cipher words materialised once (settle): XLA fused the cipher into each of the
        # four fields and computed it four times
        bits = settle(*([w[0] for w in words] + [w[1] for w in words])[:n_u])
        rows = [_bits_to_uniform(b, dtype) for b in bits]
        job = _jobs_from_rows(workload, lam, rows, dtype=dtype)
        return job.cls.astype(jnp.int32), job.alpha[..., 0].astype(jnp.int32), job.sigma, job.tau

    return draw


def _job_at(block, k):
    """Job ``k[r]`` of the block (:func:`_draw`) of every replication ``r``: ``(class, need,
    service, inter-arrival time)``, one gather per field."""
    J, R = block[0].shape
    idx = k * R + jnp.arange(R, dtype=jnp.int32)  # (fused into each gather: two operations)
    return tuple(x.reshape(-1).at[idx].get(mode="promise_in_bounds") for x in block)


def _run(
    policy, workload, lam, key, reps, warmup, n_jobs, max_events, B, saturated, dtype, init=None
):
    """:func:`_kernel` with the waiting-time histogram layout of ``workload`` (computed outside
    the trace, where the workload's arrays are concrete). ``reps`` split over several devices
    (``_sharding.shard_batch``): each device runs the kernel on its own replications
    (:func:`_sharded`), with ``init`` if given (split likewise)."""
    bins = _wait_bins(workload)[:3]
    sharding = getattr(reps, "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is not None and mesh.size > 1:
        args = (lam, key, reps, warmup, n_jobs, max_events)
        return _sharded(policy, workload, *args, B, saturated, dtype, bins, mesh, init)
    args = (lam, key, reps, warmup, n_jobs, max_events, B, saturated, dtype, init)
    return _kernel(policy, workload, *args, bins=bins)


@eqx.filter_jit
def _sharded(
    policy,
    workload,
    lam,
    key,
    reps,
    warmup,
    n_jobs,
    max_events,
    B,
    saturated,
    dtype,
    bins,
    mesh,
    init=None,
):
    """:func:`_kernel` on each device's share of ``reps`` (and of ``init``, a state of those
    replications), independently (``shard_map``): under automatic partitioning the kernel's
    loops synchronised the devices at every loop of
    :func:`~jaxqueue.mjqm.policies._queues.settle`, measured 20x slower than one device. The
    deque bodies pass split on their replication axis (``(D Q, R, 3)``) and come back flat,
    as from one device."""
    n = mesh.shape[BATCH]
    R = reps.shape[0]
    by_rep = lambda st: st._replace(q=st.q._replace(body=st.q.body.reshape(-1, R // n, 3)))  # noqa: E731
    flat = lambda st: st._replace(q=st.q._replace(body=st.q.body.reshape(-1)))  # noqa: E731

    def local(lam, key, reps, warmup, n_jobs, max_events, *init):
        init = flat(init[0]) if init else None
        args = (lam, key, reps, warmup, n_jobs, max_events, B, saturated, dtype, init)
        return by_rep(_kernel(policy, workload, *args, bins=bins))

    scalars = (lam, key, reps[: R // n], warmup, n_jobs, max_events)
    shapes = jax.eval_shape(local, *scalars)
    specs = jax.tree.map(lambda x: P(*([None] * (x.ndim - 1)), BATCH), shapes)
    specs = specs._replace(q=specs.q._replace(body=P(None, BATCH, None)))
    args, in_specs = (
        (lam, key, reps, warmup, n_jobs, max_events),
        (P(), P(), P(BATCH), P(), P(), P()),
    )
    if init is not None:  # the local state's shapes are those of the output
        body = init.q.body.reshape(-1, R, 3)
        args, in_specs = (*args, init._replace(q=init.q._replace(body=body))), (*in_specs, specs)
    f = jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=specs, check_vma=False)
    return flat(f(*args))


@eqx.filter_jit
def _kernel(
    policy, workload, lam, key, reps, warmup, n_jobs, max_events, B, saturated, dtype, init, bins
):
    """Every replication of ``reps`` until its measured jobs have left (or an arrival or a pick
    finds its deque full, or ``max_events``), all replications side by side (the last axis of
    every array), from ``init`` (default: empty), with deques of ``B`` entries.
    ``saturated``: the queue is topped up to ``B`` jobs at once (no arrival process), for the
    throughput of the saturated system."""
    s, K = workload.s, workload.n_classes
    needs = tuple(sorted({int(a) for a in workload.cores_array[:, 0]}, reverse=True))
    target = n_jobs - warmup
    n_bins = bins[0]
    ctx = _Ctx(policy, s, needs, saturated, B, warmup, n_jobs, bins)

    def active(st):
        done = st.acc.done >= n_jobs if saturated else rows_sum(st.acc.cnt) >= target
        return ~done & ~st.overflow & (st.events < max_events)

    def run(st, k, reps, stop: int):
        """Chunks of rounds from ``st`` (chunk number ``k``: the epoch moves on schedule)
        until at most ``stop`` replications are active."""
        draw = _draw(workload, lam, replication_keypairs(key, reps), dtype)

        def chunk(carry):
            st, k = carry
            block, first = draw(st.n_next), st.n_next

            def one(_, st):
                # (measured: carrying the fields packed in two arrays was 15-25% slower)
                return _round(ctx, st, active(st), _job_at(block, st.n_next - first))

            st = lax.fori_loop(0, _CHUNK, one, st)
            if jnp.dtype(dtype).itemsize < 8:  # float64 keeps absolute times (heapq reference)
                st = lax.cond(k % _REBASE == _REBASE - 1, _rebase, lambda st: st, st)
            return st, k + 1

        go_on = lambda c: jnp.sum(active(c[0]).astype(jnp.int32)) > stop  # noqa: E731
        return lax.while_loop(go_on, chunk, (st, k))

    if init is None:
        D = _layout(policy, needs)
        F = policy.front_registers
        window = policy.layout == "window"
        M = policy.window(s, needs) if window else s // min(needs)
        init = _empty(s, M, D, B, reps.shape[0], K, n_bins, dtype, F, window)
    R = reps.shape[0]
    T = R // _TAIL if R >= _TAIL_MIN else 0
    with settling(jnp.minimum(n_jobs, 1)):  # n_jobs >= 2
        st, k = run(init, jnp.int32(0), reps, T)
        if not T:
            return st
        # the last T replications to finish (and finished ones) on their own: rounds of T
        idx = jnp.argsort(~active(st), stable=True)[:T]
        body = st.q.body.reshape(-1, R, 3)
        rest = lambda st: st._replace(q=st.q._replace(body=None))  # noqa: E731
        sub = jax.tree.map(lambda x: x[..., idx], rest(st))
        sub = run(sub._replace(q=sub.q._replace(body=body[:, idx].reshape(-1))), k, reps[idx], 0)
        sub = sub[0]
        st = jax.tree.map(lambda x, y: x.at[..., idx].set(y), rest(st), rest(sub))
        body = body.at[:, idx].set(sub.q.body.reshape(-1, T, 3))
        return st._replace(q=st.q._replace(body=body.reshape(-1)))


class PolicyResult(Result):
    """Event simulation of the MJQM under one policy (:func:`simulate_policy`).

    Attributes:
        policy: the policy name. lam: arrival rate.
        response_mean: mean response time (sojourn: wait plus service, preemptions included)
            of all measured jobs, a :class:`~jaxqueue.stats.Estimate` (ratio estimator over
            replications, delta-method t interval). response_mean_class: per class.
        wait_mean, wait_mean_class: time from arrival to the first start (for a non-preemptive
            policy the whole wait). wait_var_class: per class variance of that wait.
        jobs_mean: mean number in system. idle_servers: mean idle servers.
        hol_idle_servers: mean idle servers while someone waits (these three are time
            averages over the measuring window, Estimates).
        status: a :class:`~jaxqueue.stats.Status`: ``ok``, ``overflow`` (an arrival found
            its job deque full at
            ``max_buffer``), ``"nonstationary"`` (the second half of the measured jobs stays
            significantly longer than the first, the event cap was reached, or the run is too
            short to tell: ``n_eff < MIN_EFFECTIVE``), ``"unconverged"`` (a class with
            positive probability measured in fewer than 2 replications: no interval; or
            fewer than ``MIN_REPLICATIONS`` replications, the forward scan's rule: the
            interval of a ratio over few heavy-tailed replications is too short).
        drift: relative increase of the mean response time from the first to the second half.
        n_eff: effective independent responses per replication (``_forward._effective_jobs``,
            the rule of the forward scan started empty); below its ``MIN_EFFECTIVE`` the run is
            too short to judge and the status is ``nonstationary``.
        buffer: deque entries per replication. n_jobs, warmup, replications: the run's size.
        limit: ``(method, lambda_c, (low, high))`` of the policy (``None`` values when no
            method is known).
        hist: ``(classes, bins)`` waiting-time counts pooled over replications, binned as
            the forward scan bins (``edges``; bin 0 the atom at 0): :meth:`wait_quantile`.
    """

    policy: str
    lam: float
    response_mean: Estimate
    response_mean_class: Estimate
    wait_mean: Estimate
    wait_mean_class: Estimate
    wait_var_class: np.ndarray
    jobs_mean: Estimate
    idle_servers: Estimate
    hol_idle_servers: Estimate
    status: Status
    drift: float
    n_eff: float
    buffer: int
    n_jobs: int
    warmup: int
    replications: int
    limit: tuple
    hist: np.ndarray
    edges: np.ndarray

    def wait_quantile(self, q: float, cls: int | None = None) -> float:
        """Quantile ``q`` of the wait until first service of class ``cls`` (all jobs if
        ``None``), interpolated within a histogram bin as the forward scan does (accurate to
        a fraction of a bin, ``1/16`` octave)."""
        if not 0.0 < q < 1.0:
            raise ValueError(f"q must lie in (0, 1), got {q}")
        counts = self.hist.sum(axis=0) if cls is None else self.hist[cls]
        return _quantile_from_hist(counts, self.edges, q)

    def status_reason(self) -> str:
        """Why the status is not ``ok``, in one line."""
        if self.status == Status.overflow:
            return f"an arrival found the job buffer full at {self.buffer} jobs; raise max_buffer"
        if self.status == Status.unconverged and self.replications < MIN_REPLICATIONS:
            return few_replications_reason(self.replications)
        if self.status == Status.unconverged:
            return "a class was measured in fewer than 2 replications; raise n_jobs"
        return (
            f"the mean response grew by {self.drift:.3g} (relative) from the first half to the "
            f"second, the event cap was reached, or {self.n_eff:.3g} effective responses per "
            f"replication are fewer than {MIN_EFFECTIVE:g}; raise n_jobs or lower lam"
        )

    def as_dict(self, workload: Workload) -> dict:
        """The JSON object of ``jaxqueue mjqm simulate --policy NAME --json``: the keys of
        ``mjqm simulate`` that the event engine measures, plus
        ``response_mean``, ``response_mean_ci`` (overall and per class) and the policy's
        stability limit. ``wait_p90``: from the waiting-time histogram
        (:meth:`wait_quantile`)."""
        cores = np.asarray(workload.cores_array)[:, 0]

        def pair(e: Estimate, i=None):
            m, lo, hi = (np.asarray(x) for x in (e.mean, e.low, e.high))
            if i is not None:
                m, lo, hi = m[i], lo[i], hi[i]
            return float(m), [float(lo), float(hi)]

        classes = []
        for c in range(workload.n_classes):
            r, r_ci = pair(self.response_mean_class, c)
            w, w_ci = pair(self.wait_mean_class, c)
            classes.append(
                {
                    "cores": int(cores[c]),
                    "prob": float(workload.probs[c]),
                    "response_mean": r,
                    "response_mean_ci": r_ci,
                    "wait_mean": w,
                    "wait_mean_ci": w_ci,
                    "wait_var": float(self.wait_var_class[c]),
                    "wait_p90": self.wait_quantile(0.9, c),
                }
            )
        r, r_ci = pair(self.response_mean)
        w, w_ci = pair(self.wait_mean)
        method, lam_c, lam_c_ci = self.limit
        return {
            "scenario": workload.name,
            "policy": self.policy,
            "lam": self.lam,
            "lambda_ideal": float(workload.lambda_ideal()),
            "servers": list(workload.servers),
            "classes": classes,
            "response_mean": r,
            "response_mean_ci": r_ci,
            "wait_mean": w,
            "wait_mean_ci": w_ci,
            "wait_var": None,
            "wait_p90": self.wait_quantile(0.9),
            "number_in_system": pair(self.jobs_mean)[0],
            "number_in_system_ci": pair(self.jobs_mean)[1],
            "idle_servers": pair(self.idle_servers)[0],
            "idle_servers_ci": pair(self.idle_servers)[1],
            "hol_idle_servers": pair(self.hol_idle_servers)[0],
            "hol_idle_servers_ci": pair(self.hol_idle_servers)[1],
            "stability": {"method": method, "lambda_c": lam_c, "lambda_c_ci": lam_c_ci},
            "drift": self.drift,
            "n_eff": self.n_eff,
            "buffer": self.buffer,
            "jobs": self.n_jobs,
            "warmup": self.warmup,
            "replications": self.replications,
            "status": self.status,
        }


def _estimate(num, den, level) -> Estimate:
    m, ci = _ratio_ci(num, den, level)
    return Estimate(
        jnp.asarray(m), jnp.asarray(ci[..., 0]), jnp.asarray(ci[..., 1]), len(num), level
    )


def _summarise(
    policy, lam, probs, acc, overflow, capped, B, n_jobs, warmup, level, limit, edges
) -> PolicyResult:
    a = jax.tree.map(lambda x: np.asarray(x).T, acc)  # replications first
    cnt = a.cnt.sum(1)
    resp = a.resp.sum(1)
    early = (resp - a.late_resp) / np.maximum(cnt - a.late_cnt, 1)
    late = a.late_resp / np.maximum(a.late_cnt, 1)
    scale = float(resp.sum() / max(cnt.sum(), 1))
    inc, growing = drift(early, late, scale)
    n_eff = _effective_jobs(resp, a.resp2.sum(1), cnt)
    too_short = n_eff < MIN_EFFECTIVE
    seen = (a.cnt > 0).sum(0)  # replications that measured each class
    thin = bool(np.any((np.asarray(probs) > 0) & (seen < 2))) or len(cnt) < MIN_REPLICATIONS
    if overflow:
        status = Status.overflow
    elif growing or capped or too_short:
        status = Status.nonstationary
    else:
        status = Status.unconverged if thin else Status.ok
    with np.errstate(invalid="ignore", divide="ignore"):
        wm = a.wait.sum(0) / a.cnt.sum(0)
        wvar = a.wait2.sum(0) / a.cnt.sum(0) - wm**2
    return PolicyResult(
        policy=policy,
        lam=float(lam),
        response_mean=_estimate(resp, cnt, level),
        response_mean_class=_estimate(a.resp, a.cnt, level),
        wait_mean=_estimate(a.wait.sum(1), cnt, level),
        wait_mean_class=_estimate(a.wait, a.cnt, level),
        wait_var_class=wvar,
        jobs_mean=_estimate(a.area_jobs, a.time, level),
        idle_servers=_estimate(a.area_idle, a.time, level),
        hol_idle_servers=_estimate(a.area_hol, a.time, level),
        status=status,
        drift=float(inc) / scale if scale > 0 else float("nan"),
        n_eff=n_eff,
        buffer=B,
        n_jobs=n_jobs,
        warmup=warmup,
        replications=len(cnt),
        limit=limit,
        hist=_with_zero_waits(a.hist.sum(0).reshape(len(probs), -1), a.cnt.sum(0)),
        edges=edges,
    )


def _with_zero_waits(hist, counts):
    """The histogram with bin 0 (no wait) filled in: each class's measured jobs (``counts``,
    all of them started and left) minus those that waited (the kernel counts only these)."""
    hist = np.array(hist, copy=True)
    hist[:, 0] = np.maximum(np.rint(counts).astype(hist.dtype) - hist[:, 1:].sum(axis=1), 0)
    return hist


def _check_workload(workload: Workload) -> None:
    if workload.n_types != 1 or workload.specific is not None:
        raise ValueError(
            "simulate_policy: policies are defined for one pool of identical servers (no "
            "resource vectors, no specific servers)"
        )


def _float(dtype):
    return jnp.dtype(dtype or (jnp.float64 if jax.config.jax_enable_x64 else jnp.float32))


def simulate_policy(
    workload: Workload,
    lam: float,
    policy: str | Policy = "fcfs",
    *,
    key: PRNGKeyArray,
    n_jobs: int = 20_000,
    n_replications: int = 64,
    warmup: int | None = None,
    buffer: int | None = None,
    max_buffer: int = 4096,
    level: float = 0.95,
    dtype=None,
    override: bool = False,
    progress=None,
    devices=None,
    limit: tuple | None = None,
    throw: bool = False,
) -> PolicyResult:
    """Event simulation of the MJQM under ``policy`` (module docstring), ``n_replications``
    independent queues started empty.

    Args:
        workload: one pool of ``s`` identical servers (any service and arrival laws).
        lam: arrival rate; refused at or beyond the policy's known stability limit
            (``policy.stability_limit``) unless ``override``.
        policy: a name of :data:`~jaxqueue.mjqm.policies.POLICIES` (``"window:4"``) or a
            policy object.
        key: PRNG key (job ``n`` of replication ``r`` depends on ``(key, r, n)`` only).
        n_jobs: jobs per replication, warm-up included. warmup: default ``n_jobs // 5``.
        buffer: entries per job deque to start with (default ``_first_buffer``); the
            replications that overflow go on with twice the entries, up to ``max_buffer``
            (and the policy's own ``max_buffer``: 2^14 for easy-backfilling, whose pick packs
            a FIFO position into 16 bits of an int32).
        level: confidence level. dtype: float dtype (default float64 under x64).
        progress: optional ``callable(str)`` told of each run once the arguments are checked.
        devices: devices to shard the replications over (default ``jax.devices()``; the
            largest count dividing the replications run is used; results do not depend on it).
        limit: the policy's ``stability_limit`` if already known (a sweep computes it once).
        throw: raise :class:`~jaxqueue.stats.EstimateError` when the status is not ``ok``
            (default: return the result with its status).

    Returns:
        :class:`PolicyResult`.

    Raises:
        ValueError: a bad argument, a workload with several resource types or specific
            servers, or (without ``override``) ``lam`` at or beyond a known limit.
        EstimateError: with ``throw``, a status other than ``ok``.
    """
    pol = parse_policy(policy)
    _check_workload(workload)
    warmup = n_jobs // 5 if warmup is None else int(warmup)
    if not (lam > 0 and math.isfinite(lam)):
        raise ValueError(f"simulate_policy: lam must be positive and finite, got {lam!r}")
    if n_replications < 2:
        raise ValueError(f"simulate_policy: n_replications must be >= 2, got {n_replications}")
    if not 0 <= warmup < n_jobs - 1:
        raise ValueError(f"simulate_policy: need 0 <= warmup < n_jobs - 1, got {warmup}, {n_jobs}")
    if limit is None:
        limit = pol.stability_limit(workload, key=jax.random.fold_in(key, 0x5AB1E))
    if limit[1] is not None and lam >= limit[1] and not override:
        raise ValueError(
            f"simulate_policy: lam = {lam:.6g} is at or beyond the stability limit of "
            f"{pol.label} ({limit[0]}: lambda_c = {limit[1]:.6g}); the queue grows without bound"
        )
    sizes, dt = (n_replications, warmup, n_jobs), _float(dtype)
    runs = _runs(pol, workload, lam, key, sizes, buffer, max_buffer, dt, devices, progress)
    acc, overflow, capped, B = runs
    probs = np.asarray(workload.probs)
    edges = _wait_bins(workload)[3]
    rest = (n_jobs, warmup, level, limit, edges)
    res = _summarise(pol.label, lam, probs, acc, overflow, capped, B, *rest)
    return res.raise_for_status() if throw else res


def _runs(pol, workload, lam, key, sizes, buffer, max_buffer, dt, devices=None, progress=None):
    """The kernel over every replication. Those whose buffer fills go on from where they
    stopped with twice the slots (an arrival that finds the buffer full stops its replication
    before the event), so the result is that of a run with the larger buffer from the start.
    Returns the per-replication sums, whether any still overflowed at ``max_buffer``, whether
    any hit the event cap, and the last buffer size. ``sizes``: ``(replications, warmup,
    jobs)``."""
    n_replications, warmup, n_jobs = sizes
    max_buffer = min(max_buffer, pol.max_buffer)
    B = min(buffer or _first_buffer(workload, pol), max_buffer)
    args = (jnp.asarray(lam, dt), key)
    todo = np.arange(n_replications)
    mesh = batch_mesh(batch_devices(n_replications, devices))
    (reps,) = shard_batch(mesh, jnp.asarray(todo, jnp.int32))
    init, acc = None, None
    overflow, capped = np.zeros(n_replications, bool), np.zeros(n_replications, bool)
    while True:
        if progress is not None:
            progress(f"{pol.label}: {len(todo)} replications x {n_jobs} jobs, {B} slots")
        max_events = 4 * n_jobs + 64 * B
        out = _run(
            pol,
            workload,
            *args,
            reps,
            jnp.int32(warmup),
            jnp.int32(n_jobs),
            jnp.int32(max_events),
            B,
            False,
            dt,
            init,
        )
        st = jax.tree.map(to_host, out)
        part = st.acc
        acc = part if acc is None else jax.tree.map(functools.partial(_merge, rows=todo), acc, part)
        overflow[todo], capped[todo] = st.overflow, st.events >= max_events
        if not st.overflow.any() or 2 * B > max_buffer:
            return acc, bool(overflow.any()), bool(capped.any()), B
        # go on with the replications that filled their buffer, twice the slots
        over = st.overflow
        todo, B = todo[over], 2 * B
        mesh = batch_mesh(batch_devices(len(todo), devices))
        (reps,) = shard_batch(mesh, jnp.asarray(todo, jnp.int32))
        init = _grow(_select(st, over), B)


def _select(st: _State, rows) -> _State:
    """The replications ``rows`` (a mask) of a state on the host."""
    D, R = st.q.head.shape
    body = np.asarray(st.q.body).reshape(D, -1, R, 3)[:, :, rows].reshape(-1)
    st = st._replace(q=st.q._replace(body=np.zeros((1, R))))
    st = jax.tree.map(lambda x: np.asarray(x)[..., rows], st)
    return st._replace(q=st.q._replace(body=body))


def _grow(st: _State, B: int) -> _State:
    """The state with deques of ``B`` entries (each laid out from its front, the new entries
    empty) and the overflow flags cleared."""
    q = st.q
    D, R = q.head.shape
    Q = q.capacity
    body = np.asarray(q.body).reshape(D, Q, R, 3)
    ring = (np.asarray(q.head)[:, None, :] + np.arange(Q)[None, :, None]) % Q  # (D, Q, R)
    body = np.take_along_axis(body, ring[..., None], axis=1)
    body = np.concatenate([body, np.zeros((D, B - Q, R, 3), body.dtype)], axis=1)
    q = q._replace(body=body.reshape(-1), head=np.zeros_like(q.head))
    return st._replace(q=q, overflow=np.zeros_like(st.overflow))


def _first_buffer(workload: Workload, policy: Policy) -> int:
    """Deque entries to start with. Most policies touch one entry of a deque per event, so a
    round hardly costs more with more entries, while the replications that overflow go on
    alone, where a round costs its fixed overhead for a handful of them: four times the most
    jobs in service and 8 more, at least 64 (``window:W`` keeps its first ``W`` entries in
    registers and touches one entry too). EASY passes over its whole FIFO body in the rounds
    where a replication has a candidate behind its 16 registers: twice the most jobs in
    service and 8 more, at least 16 (five-class-exp at lam 0.900428, 1024 x 2000 jobs, 2
    host devices: from 32 entries 13 replications overflowed and ran again with 64, 0.78 s;
    0.38 s from 64, where none did). Rounded up to a power of 2."""
    most = workload.s // int(np.min(workload.cores_array[:, 0]))
    if policy.picks_inside:
        return max(16, 1 << math.ceil(math.log2(2 * (most + 8))))
    return max(64, 1 << math.ceil(math.log2(4 * (most + 8))))


def _merge(full, part, *, rows):
    """Write the replications ``rows`` (the last axis) of ``part`` into ``full``."""
    out = np.array(full, copy=True)
    out[..., rows] = part
    return out


def saturated_throughput(
    workload: Workload,
    policy: str | Policy,
    *,
    key: PRNGKeyArray,
    n_jobs: int = 20_000,
    n_replications: int = 32,
    buffer: int | None = None,
    level: float = 0.95,
    dtype=None,
) -> tuple[float, tuple[float, float]]:
    """Departure rate of the saturated system (``buffer`` jobs always present, topped up at
    every completion) with its interval over replications: the stability limit of policies
    whose service depends only on the jobs in service and the first ``W`` waiting ones (fcfs:
    ``lambda_c``; ``window:W``). ``buffer`` at least the most jobs in service plus ``W``
    (the default, rounded up to a power of 2)."""
    pol = parse_policy(policy)
    _check_workload(workload)
    dt = _float(dtype)
    W = getattr(pol, "W", 1)
    need = workload.s // int(np.min(workload.cores_array[:, 0])) + W  # in service + window
    B = buffer or max(8, 1 << math.ceil(math.log2(need)))
    if B < need:
        raise ValueError(
            f"saturated_throughput: buffer {B} < {need} (most jobs in service + W): the "
            "queue behind the window would run dry"
        )
    warmup = n_jobs // 5
    reps = jnp.arange(n_replications, dtype=jnp.int32)
    args = (jnp.asarray(1.0, dt), key, reps, jnp.int32(warmup), jnp.int32(n_jobs))
    st = _run(pol, workload, *args, jnp.int32(4 * n_jobs + 64 * B), B, True, dt)
    done = np.full(n_replications, float(n_jobs - warmup))
    m, ci = _ratio_ci(done, np.asarray(st.acc.time), level)
    return float(m), (float(ci[0]), float(ci[1]))
