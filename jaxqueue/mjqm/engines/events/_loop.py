"""The event engine's kernel: all replications in one ``lax.while_loop`` of rounds.

The replications advance side by side (the last axis of every array), sharded over devices
on that axis like the forward scan, each device running the kernel on its own share
(:func:`_sharded`). Arrivals are drawn from the counter-based inputs of ``jaxqueue._random`` (job
``n`` of replication ``r`` is the same job as in the MJSRE simulators), a block of the next
``_CHUNK`` jobs of every replication per chunk of ``_CHUNK`` rounds (:func:`_draw`).

A round costs the same for every replication of the batch, finished or not, and the loop runs
until the slowest finishes: once no more than ``1 / _TAIL`` of them are active, they go on in
a batch of that size. On XLA:CPU a round's cost is its thunks: XLA fuses the per-replication
decisions of a round into every ``(slots, R)`` update and recomputes them per element, so
``jaxqueue._jit.settle`` computes them once, and the per-round decisions are kept in int32 and
cheap (a fusion with much arithmetic is split over two threads, a hand-off each).

float64 runs keep absolute times, as the heapq reference does; float32 runs move the epoch to
the clock every ``_REBASE`` chunks, so they do not lose digits as the clock grows.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ...._jit import rows_sum, settle, settling
from ...._random import bits_to_uniform as _bits_to_uniform
from ...._random import replication_keypairs, threefry2x32
from ...._sharding import BATCH, to_host
from ..._inputs import _jobs_from_rows, n_uniforms
from ._accumulate import _wait_bins
from ._layout import layout_of, needs_of
from ._round import _Ctx, _empty, _rebase, _round

_CHUNK = 32  # rounds per check of the loop condition
_TAIL = 8  # the last 1/_TAIL of the replications to finish run on in a batch that small ...
_TAIL_MIN = 256  # ... in batches of at least this many replications (per device)
_REBASE = 16  # chunks between moves of the epoch (float32 only)


def _draw(workload, lam, keypairs, dtype):
    """``draw(n)``: the block of jobs ``n[r] .. n[r] + _CHUNK - 1`` of every replication ``r``
    from the counter-based inputs, ``(4, _CHUNK, R)``: class, need, service, inter-arrival time
    (all in ``dtype``; class and need are small integers, exact). A chunk of ``_CHUNK`` rounds
    takes at most ``_CHUNK`` arrivals, so one block per chunk serves them all. Drawn per round,
    the cipher and the class choice would be fusions of ``R`` values that XLA:CPU splits over
    two threads every round; the block is the same arithmetic in large fusions once per chunk,
    and a round reads its job with one gather (:func:`_job_at`)."""

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


def _given(jobs, reps):
    """``draw(n)`` of a replay: the block of the given jobs ``n[r] .. n[r] + _CHUNK - 1`` of
    column ``reps[r]`` (``jobs``: class, need, service, inter-arrival time, ``(jobs + _CHUNK,
    columns)`` each, the padding never arriving), as :func:`_draw` gives drawn ones. The
    column is the replication's own, not its place in the batch: a batch of the columns that
    grew, or a tail, holds some of them."""

    def draw(n):
        rows = n[None] + jnp.arange(_CHUNK, dtype=n.dtype)[:, None]
        cols = reps.astype(n.dtype)[None]
        return tuple(x.at[rows, cols].get(mode="clip") for x in jobs)

    return draw


def _job_at(block, k):
    """Job ``k[r]`` of the block (:func:`_draw`) of every replication ``r``: ``(class, need,
    service, inter-arrival time)``, one gather per field."""
    J, R = block[0].shape
    idx = k * R + jnp.arange(R, dtype=jnp.int32)  # (fused into each gather: two operations)
    return tuple(x.reshape(-1).at[idx].get(mode="promise_in_bounds") for x in block)


class Run(NamedTuple):
    """What a run of :func:`_kernel` is given besides the policy and the workload: the arrival
    rate (a scalar, or one per replication: several loads side by side), the key, the
    replication indices, the warm-up and total jobs and the event cap (traced), the deque
    entries ``B``, ``saturated``, the float dtype and ``tail`` (static: whether the last
    replications to finish go on in a smaller batch; without it the kernel holds one loop,
    half the compilation, for a batch whose replications finish together) and ``tied``
    (static: a replay whose given arrival times tie, ``_layout.layout_of``)."""

    lam: Any
    key: Any
    reps: Any
    warmup: Any
    n_jobs: Any
    max_events: Any
    B: int
    saturated: bool
    dtype: Any
    tail: bool = True
    tied: bool = False


def _run(policy, workload, run: Run, init=None, jobs=None):
    """:func:`_kernel` with the waiting-time histogram layout of ``workload`` (computed outside
    the trace, where the workload's arrays are concrete). ``run.reps`` split over several
    devices (``_sharding.shard_batch``): each device runs the kernel on its own replications
    (:func:`_sharded`), with ``init`` if given (split likewise). ``jobs``: a replay's given
    jobs instead of drawn ones (:func:`_given`; one device)."""
    bins = _wait_bins(workload)[:3]
    policy = policy.bind(workload)  # what it reads from the workload (Gittins ranks)
    sharding = getattr(run.reps, "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if jobs is not None:
        return _kernel(policy, workload, run, init, bins=bins, jobs=jobs)
    if mesh is not None and mesh.size > 1:
        return _sharded(policy, workload, run, bins, mesh, init)
    return _kernel(policy, workload, run, init, bins=bins)


@eqx.filter_jit
def _sharded(policy, workload, run: Run, bins, mesh, init=None):
    """:func:`_kernel` on each device's share of ``run.reps`` (and of ``init``, a state of those
    replications), independently (``shard_map``): under automatic partitioning the kernel's
    loops would synchronise the devices at every loop of :func:`jaxqueue._jit.settle`. The
    deque bodies pass split on their replication axis (``(D Q, R, width)``) and come back flat,
    as from one device."""
    n = mesh.shape[BATCH]
    R = run.reps.shape[0]

    def local(*traced):  # the traced fields of ``run`` (this device's share), then ``init``
        init = _flat(traced[6]) if len(traced) > 6 else None
        out = _kernel(policy, workload, Run(*traced[:6], *run[6:]), init, bins=bins)
        return _by_rep(out, R // n)

    lam, key, reps, warmup, n_jobs, max_events = run[:6]
    share = lam[: R // n] if jnp.ndim(lam) else lam  # a rate per replication is split too
    shapes = jax.eval_shape(local, share, key, reps[: R // n], warmup, n_jobs, max_events)
    specs = jax.tree.map(lambda x: P(*([None] * (x.ndim - 1)), BATCH), shapes)
    specs = specs._replace(q=specs.q._replace(body=P(None, BATCH, None)))
    by_lam = P(BATCH) if jnp.ndim(lam) else P()
    args, in_specs = run[:6], (by_lam, P(), P(BATCH), P(), P(), P())
    if init is not None:  # the local state's shapes are those of the output
        args, in_specs = (*args, _by_rep(init, R)), (*in_specs, specs)
    f = jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=specs, check_vma=False)
    return _flat(f(*args))


def _engine(policy, workload, run: Run, bins, jobs=None):
    """The pieces of :func:`_kernel`: ``active(st)`` (the replications still running),
    ``chunks(st, k, reps, lam, stop, more=None)`` (chunks of rounds from ``st``, chunk number
    ``k``, until at most ``stop`` replications are active or ``more(st)`` is false) and
    ``empty()`` (every replication of ``run.reps`` empty)."""
    lam, key, reps, warmup, n_jobs, max_events, B, saturated, dtype, tail, tied = run
    s, K = workload.s, workload.n_classes
    needs = needs_of(workload)
    layout = layout_of(policy, s, needs, tied)
    target = n_jobs - warmup
    n_bins = bins[0]
    ctx = _Ctx(layout, s, needs, saturated, B, warmup, n_jobs, bins)

    def active(st):
        done = st.acc.done >= n_jobs if saturated else rows_sum(st.acc.cnt) >= target
        return ~done & ~st.overflow & (st.events < max_events)

    def chunks(st, k, reps, lam, stop: int, more=None):
        """Chunks of rounds from ``st`` (chunk number ``k``: the epoch moves on schedule)
        until at most ``stop`` replications are active (or ``more(st)`` is false)."""
        if jobs is None:
            draw = _draw(workload, lam, replication_keypairs(key, reps), dtype)
        else:
            draw = _given(jobs, reps)

        def chunk(carry):
            st, k = carry
            block, first = draw(st.n_next), st.n_next
            if layout.estimated:  # each job's estimate, once per job
                block = (*block[:4], layout.estimate(block[2]))

            def one(_, st):
                return _round(ctx, st, active(st), _job_at(block, st.n_next - first))

            st = lax.fori_loop(0, _CHUNK, one, st)
            if jnp.dtype(dtype).itemsize < 8:  # float64 keeps absolute times (heapq reference)
                st = lax.cond(k % _REBASE == _REBASE - 1, _rebase, lambda st: st, st)
            return st, k + 1

        go_on = lambda c: jnp.sum(active(c[0]).astype(jnp.int32)) > stop  # noqa: E731
        if more is not None:
            go_on = lambda c, go_on=go_on: go_on(c) & more(c[0])  # noqa: E731
        return lax.while_loop(go_on, chunk, (st, k))

    def empty():
        M = layout.rows or s // min(needs)
        D, F = layout.deques(needs), layout.registers
        if layout.all_rows:  # every job in a row: the rows are the buffer, no deque body
            rows = (True, True, layout.estimate is not None)
            init = _empty(s, B, D, 1, reps.shape[0], K, n_bins, dtype, F, *rows)
        else:
            rows = (layout.rows > 0, False, False, layout.slot_waits, layout.estimated)
            init = _empty(s, M, D, B, reps.shape[0], K, n_bins, dtype, F, *rows)
        if jobs is not None:  # a replay logs every first start
            L, R = jobs[0].shape[0] - _CHUNK, reps.shape[0]
            log = (jnp.zeros((4 * L, R), dtype), jnp.zeros(R, jnp.int32))
            init = init._replace(acc=init.acc._replace(starts=log[0], logged=log[1]))
        return init

    return active, chunks, empty


def _tail_size(tail: bool, R: int) -> int:
    """The replications of a batch of ``R`` that finish in a batch of their own."""
    return R // _TAIL if tail and R >= _TAIL_MIN else 0


@eqx.filter_jit
def _kernel(policy, workload, run: Run, init, bins, jobs=None):
    """Every replication of ``reps`` until its measured jobs have left (or an arrival or a pick
    finds its deque full, or ``max_events``), all replications side by side (the last axis of
    every array), from ``init`` (default: empty), with deques of ``B`` entries.
    ``saturated``: the queue is topped up to ``B`` jobs at once (no arrival process), for the
    throughput of the saturated system. ``jobs``: the given jobs of a replay (:func:`_given`;
    its first starts logged: ``_accumulate._record_start``)."""
    active, run_chunks, empty = _engine(policy, workload, run, bins, jobs)
    lam, reps, n_jobs = run.lam, run.reps, run.n_jobs
    if init is None:
        init = empty()
    R = reps.shape[0]
    T = _tail_size(run.tail, R)
    with settling(jnp.minimum(n_jobs, 1)):  # n_jobs >= 2
        st, k = run_chunks(init, jnp.int32(0), reps, lam, T)
        if not T:
            return st
        # the last T replications to finish (and finished ones) on their own: rounds of T
        idx = jnp.argsort(~active(st), stable=True)[:T]
        lam_idx = lam[idx] if jnp.ndim(lam) else lam
        st, _ = _on_tail(st, idx, R, lambda sub: run_chunks(sub, k, reps[idx], lam_idx, 0))
        return st


def _on_tail(st, idx, R: int, run_tail):
    """``st`` after ``run_tail(sub) -> (sub, out)`` on its replications ``idx`` (of ``R``),
    taken out with their deque bodies and put back; returns ``(st, out)``."""
    body = st.q.body.reshape(-1, R, st.q.width)
    rest = lambda st: st._replace(q=st.q._replace(body=None))  # noqa: E731
    sub = jax.tree.map(lambda x: x[..., idx], rest(st))
    sub = sub._replace(q=sub.q._replace(body=body[:, idx].reshape(-1)))
    sub, out = run_tail(sub)
    st = jax.tree.map(lambda x, y: x.at[..., idx].set(y), rest(st), rest(sub))
    body = body.at[:, idx].set(sub.q.body.reshape(-1, idx.shape[0], st.q.width))
    return st._replace(q=st.q._replace(body=body.reshape(-1))), out


class Part(NamedTuple):
    """A run of :func:`_kernel` in parts (:func:`_part`), between two calls: the state (deque
    bodies ``(D Q, R, width)``), per device the chunk number of the batch and of its tail, the
    tail's replications (``T`` per device, :func:`_kernel`'s) and whether they run; per
    replication the jobs done (its departures, at most ``n_jobs``; ``n_jobs`` once it stopped)."""

    st: Any
    k: Any
    k_tail: Any
    idx: Any
    tail: Any
    jobs: Any


def _kernel_part(policy, workload, run: Run, part: Part, bins, goal):
    """:func:`_kernel` from ``part`` until the jobs done of the batch reach ``goal`` (a
    fraction of ``R n_jobs``) or every replication stopped: the same chunks of rounds in the
    same order, the batch's tail chosen as there, so the state after the last part is that of
    one call."""
    active, run_chunks, _ = _engine(policy, workload, run, bins)
    lam, reps, n_jobs = run.lam, run.reps, run.n_jobs
    R = reps.shape[0]
    T = _tail_size(run.tail, R)

    def jobs(st):
        return jnp.where(active(st), jnp.minimum(st.n_next - st.count, n_jobs), n_jobs)

    def short(st, others=0):  # (float32: a stop test, no number depends on it)
        done = jnp.sum(jobs(st).astype(jnp.float32)) + others
        return done < goal * R * n_jobs.astype(jnp.float32)

    with settling(jnp.minimum(n_jobs, 1)):
        st, k = run_chunks(part.st, part.k[0], reps, lam, T, short)
        if not T:
            return part._replace(st=st, k=k[None], jobs=jobs(st))
        start = ~part.tail[0] & (jnp.sum(active(st).astype(jnp.int32)) <= T)
        tail = part.tail[0] | start
        idx = jnp.where(start, jnp.argsort(~active(st), stable=True)[:T], part.idx)
        k_tail = jnp.where(start, k, part.k_tail[0])
        # the tail's replications taken out and put back (unchanged while it does not run)
        others = (R - T) * n_jobs.astype(jnp.float32)  # stopped: not in the tail
        more = lambda st: tail & short(st, others)  # noqa: E731
        lam_idx = lam[idx] if jnp.ndim(lam) else lam
        st, k_tail = _on_tail(
            st, idx, R, lambda sub: run_chunks(sub, k_tail, reps[idx], lam_idx, 0, more)
        )
        return Part(st, k[None], k_tail[None], idx, tail[None], jobs(st))


def _by_rep(st, R: int):
    """``st`` with its deque bodies as ``(D Q, R, width)``: split on the replications."""
    return st._replace(q=st.q._replace(body=st.q.body.reshape(-1, R, st.q.width)))


def _flat(st):
    """``st`` with its deque bodies flat, as the kernel keeps them."""
    return st._replace(q=st.q._replace(body=st.q.body.reshape(-1)))


def part_specs(part: Part):
    """The ``PartitionSpec`` of every array of ``part``: split on the replications (the last
    axis; the deque bodies' middle one; per device arrays on their only one)."""
    specs = jax.tree.map(lambda x: P(*([None] * (x.ndim - 1)), BATCH), part)
    return specs._replace(st=specs.st._replace(q=specs.st.q._replace(body=P(None, BATCH, None))))


@eqx.filter_jit
def _part(policy, workload, run: Run, bins, mesh, part: Part, goal):
    """One call of a run in parts: :func:`_kernel_part` on each device's share (as
    :func:`_sharded`; ``mesh``: ``None`` on one device), one program for every ``goal``."""
    n = 1 if mesh is None else mesh.shape[BATCH]

    def local(*traced):  # the traced fields of ``run`` (this device's share), part, goal
        part, r = traced[6], traced[2].shape[0]
        part = part._replace(st=_flat(part.st))
        out = _kernel_part(policy, workload, Run(*traced[:6], *run[6:]), part, bins, traced[7])
        return out._replace(st=_by_rep(out.st, r))

    if n == 1:
        return local(*run[:6], part, goal)
    by_lam = P(BATCH) if jnp.ndim(run.lam) else P()
    specs = part_specs(part)
    in_specs = (by_lam, P(), P(BATCH), P(), P(), P(), specs, P())
    f = jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=specs, check_vma=False)
    return f(*run[:6], part, goal)


PARTS = 20
"""Calls a run in parts is split into at most (:func:`_run_parts`)."""


def _run_parts(policy, workload, run: Run, init, tell):
    """:func:`_run` of drawn jobs as up to :data:`PARTS` calls of one program
    (:func:`_part`), the state handed from call to call, the same numbers; ``tell(done,
    total)`` after each call: the jobs done over all replications (:class:`Part`) and ``R
    n_jobs``. Returns the state."""
    bins = _wait_bins(workload)[:3]
    policy = policy.bind(workload)
    mesh = getattr(getattr(run.reps, "sharding", None), "mesh", None)
    n = 1 if mesh is None else mesh.shape[BATCH]
    R = run.reps.shape[0]
    st = _engine(policy, workload, run, bins)[2]() if init is None else init
    idx = np.tile(np.arange(_tail_size(run.tail, R // n), dtype=np.int32), n)
    each = np.zeros(n, np.int32)
    part = Part(_by_rep(st, R), each, each, idx, each > 0, np.zeros(R, np.int32))
    if n == 1:
        part = jax.tree.map(jnp.asarray, part)
    else:  # placed as the program returns it
        put = lambda s, x: jax.device_put(x, NamedSharding(mesh, s))  # noqa: E731
        part = jax.tree.map(put, part_specs(part), part, is_leaf=lambda x: isinstance(x, P))
    total = R * int(run.n_jobs)
    done = 0
    for p in range(1, PARTS + 1):
        goal = p / PARTS if p < PARTS else 2.0  # the last call: to the end
        if done < min(goal, 1) * total:
            part = _part(policy, workload, run, bins, mesh, part, jnp.float32(goal))
            done = int(np.sum(to_host(part.jobs), dtype=np.int64))
            tell(done, total)
    return _flat(part.st)
