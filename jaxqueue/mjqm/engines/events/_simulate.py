"""The event engine's entry points: :func:`simulate` (an event simulation of the MJQM under a
job-list policy, with the host-side loop that grows the deques of the replications that
overflow) and :func:`saturated_throughput` (the departure rate of the saturated system).

Measured: the jobs ``warmup .. n_jobs - 1`` of each replication, until every one of them has
left (arrivals go on meanwhile); time averages over the arrivals of those jobs. An arrival (or
a preemption) that finds its deque full is an overflow (never used silently): the replications
that overflowed go on from there with twice the entries, up to ``max_buffer``, and beyond it
the status is ``overflow``.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PRNGKeyArray

from ...._sharding import batch_devices, batch_mesh, shard_batch, to_host
from ....stats import ratio_ci as _ratio_ci
from ..._stability import check_load, used_limit
from ..._workload import Workload
from ...options import Execution
from ...policies import Policy, parse_policy
from ._accumulate import _wait_bins
from ._layout import first_buffer, layout_of, needs_of
from ._loop import Run, _run, _run_parts
from ._result import PolicyResult, _summarise
from ._round import _State

__all__ = [
    "simulate",
    "simulate_loads",
    "simulate_policy",
    "saturated_throughput",
    "check_workload",
]


def check_workload(workload: Workload) -> None:
    """Refuse a workload the job-list policies are not defined for (``ValueError``)."""
    if workload.n_types != 1 or workload.specific is not None:
        raise ValueError(
            "simulate_policy: policies are defined for one pool of identical servers (no "
            "resource vectors, no specific servers)"
        )


def _float(dtype):
    return jnp.dtype(dtype or (jnp.float64 if jax.config.jax_enable_x64 else jnp.float32))


def simulate(
    workload: Workload,
    lam: float,
    policy: str | Policy = "fcfs",
    *,
    throw: bool = False,
    **options,
) -> PolicyResult:
    """Event simulation of the MJQM under ``policy`` at one arrival rate ``lam``:
    :func:`simulate_loads` at ``[lam]``, whose keyword options (``key``, ``n_jobs``,
    ``n_replications``, ``warmup``, ``dtype``, ``level``, ``max_buffer``, ``execution``,
    ``limit``, ``override``, ``progress``) it takes.

    Args:
        throw: raise :class:`~jaxqueue.stats.EstimateError` when the status is not ``ok``
            (default: return the result with its status).

    Returns:
        :class:`PolicyResult`.

    Raises:
        ValueError: as :func:`simulate_loads`.
        EstimateError: with ``throw``, a status other than ``ok``.
    """
    (res,) = simulate_loads(workload, [lam], policy, **options)
    return res.raise_for_status() if throw else res


def simulate_loads(
    workload: Workload,
    lams,
    policy: str | Policy = "fcfs",
    *,
    key: PRNGKeyArray,
    n_jobs: int = 20_000,
    n_replications: int = 64,
    warmup: int | None = None,
    dtype=None,
    level: float = 0.95,
    max_buffer: int = 4096,
    execution: Execution = Execution(),
    limit=None,
    override: bool = False,
    progress=None,
) -> list[PolicyResult]:
    """Event simulation of the MJQM under ``policy`` (module docstring) at each arrival rate
    of ``lams``, ``n_replications`` independent queues started empty per rate (the engine's
    state layout: ``_layout.layout_of``), all in one kernel call: the rates side by side as
    columns of one batch (``len(lams) x n_replications``), each result equal to that of
    :func:`simulate` at its rate alone (the same replications, the same numbers). Every rate
    is checked before any run.

    Args:
        workload: one pool of ``s`` identical servers (any service and arrival laws).
        lams: arrival rates; each refused at or beyond ``lambda_ideal``, the policy's closed
            form or ``limit`` unless ``override``.
        policy: a name of :data:`~jaxqueue.mjqm.policies.POLICIES` (``"window:4"``) or a
            policy object.
        key: PRNG key (job ``n`` of replication ``r`` depends on ``(key, r, n)`` only).
        n_jobs: jobs per replication, warm-up included. warmup: default ``n_jobs // 5``.
        dtype: float dtype (default float64 under x64). level: confidence level.
        max_buffer: most entries per job deque (and the layout's own ``max_buffer``: 2^14 for
            easy-backfilling, whose pick packs a FIFO position into 16 bits of an int32); a
            replication that fills it gives the status ``overflow``.
        execution: the devices and the first deque size
            (:class:`~jaxqueue.mjqm.options.Execution`: ``devices``, ``buffer``, default
            ``_layout.first_buffer``; the replications that overflow go on with twice the
            entries, up to ``max_buffer``); no number depends on it.
        limit: a :class:`~jaxqueue.mjqm.StabilityResult` of
            :func:`~jaxqueue.mjqm.stability_limit` for this policy, a number, or ``None`` (the
            cheap checks only; the status catches a load beyond the limit).
        override: skip the stability checks.
        progress: optional ``callable(str)`` told of each run once the arguments are checked
            and, as it goes, of the jobs done over all replications (``k/n jobs (p%)``, a
            replication that stopped counting all its jobs): with it, each run goes as a
            few calls of one compiled program, the state handed from call to call (the
            same numbers).

    Returns:
        a :class:`PolicyResult` per rate.

    Raises:
        ValueError: a bad argument, a workload with several resource types or specific
            servers, or (without ``override``) a rate at or beyond a known limit.
    """
    pol = parse_policy(policy)
    check_workload(workload)
    pol = pol.bind(workload)  # what it reads from the workload, refused before any run
    Execution.check("simulate_policy", "execution", execution).only("event", "buffer")
    warmup = n_jobs // 5 if warmup is None else int(warmup)
    if n_replications < 2:
        raise ValueError(f"simulate_policy: n_replications must be >= 2, got {n_replications}")
    if not 0 <= warmup < n_jobs - 1:
        raise ValueError(f"simulate_policy: need 0 <= warmup < n_jobs - 1, got {warmup}, {n_jobs}")
    lams = [check_load(workload, x, limit=limit, policy=pol, override=override) for x in lams]
    if not lams:
        raise ValueError("simulate_policy: no arrival rate given")
    used = used_limit(workload, limit, pol)
    limit = (used.summary()["method"], used.lambda_c, used.lambda_c_ci)
    L, n = len(lams), n_replications
    dt = _float(dtype)
    # one load: a scalar rate (the kernel a single run has always compiled)
    lam, reps = (lams[0], None) if L == 1 else (np.repeat(lams, n), np.tile(np.arange(n), L))
    buffers = (execution.buffer, max_buffer)
    more = (execution.devices, progress, None, reps, progress is not None)
    sizes = (L * n, warmup, n_jobs)
    acc, overflow, capped, B = _runs(pol, workload, lam, key, sizes, *buffers, dt, *more)
    probs = np.asarray(workload.probs)
    edges = _wait_bins(workload)[3]
    rest = (n_jobs, warmup, level, limit, edges)
    out = []
    for j, x in enumerate(lams):
        cols = slice(j * n, (j + 1) * n)
        # contiguous, as a run alone returns them: numpy's sums depend on the memory layout
        part = jax.tree.map(lambda a: np.ascontiguousarray(a[..., cols]), acc)  # noqa: B023
        flags = (bool(overflow[cols].any()), bool(capped[cols].any()), int(B[cols].max()))
        out.append(_summarise(pol.label, x, probs, part, *flags, *rest))
    return out


def _runs(
    pol,
    workload,
    lam,
    key,
    sizes,
    buffer,
    max_buffer,
    dt,
    devices=None,
    progress=None,
    jobs=None,
    reps=None,
    parts=False,
    tied=False,
):
    """The kernel over every replication. Those whose buffer fills go on from where they
    stopped with twice the slots (an arrival that finds the buffer full stops its replication
    before the event), so the result is that of a run with the larger buffer from the start.
    Returns the per-replication sums and, per column (numpy arrays of ``replications``),
    whether it still overflowed at ``max_buffer``, whether it hit the event cap, and its last
    buffer size. ``sizes``: ``(replications, warmup, jobs)``. ``jobs``: a replay's given jobs
    (``_loop._given``). ``reps``: the replication index of each column (default ``0 ..
    replications - 1``); ``lam``: a number, or one rate per column (several loads side by
    side, each column the same replication as in a run at its load alone). With ``reps``
    the kernel has no tail batch (``Run.tail``): the columns finish together. ``parts``: each
    run in parts (``_loop._run_parts``), ``progress`` told the jobs done after each.
    ``tied``: the given jobs' arrival times tie (``_layout.layout_of``)."""
    n_replications, warmup, n_jobs = sizes
    layout = layout_of(pol, workload.s, needs_of(workload), tied)
    max_buffer = min(max_buffer, layout.max_buffer)
    loads = 1 if np.ndim(lam) == 0 else len(np.unique(lam))  # several side by side
    B = min(buffer or first_buffer(workload, layout, loads), max_buffer)
    ids = np.arange(n_replications) if reps is None else np.asarray(reps)
    lams = None if np.ndim(lam) == 0 else np.asarray(lam, dt)
    args = (jnp.asarray(lam, dt), key) if lams is None else None
    todo = np.arange(n_replications)
    init, acc = None, None
    overflow, capped = np.zeros(n_replications, bool), np.zeros(n_replications, bool)
    buffers = np.zeros(n_replications, int)
    while True:
        mesh = batch_mesh(batch_devices(len(todo), devices))
        (col_reps,) = shard_batch(mesh, jnp.asarray(ids[todo], jnp.int32))
        if lams is not None:
            args = (*shard_batch(mesh, jnp.asarray(lams[todo])), key)
        label = f"{pol.label}: {len(todo)} replications x {n_jobs} jobs, {B} slots"
        if progress is not None:
            progress(label)
        max_events = 4 * n_jobs + 64 * B
        counts = (jnp.int32(warmup), jnp.int32(n_jobs), jnp.int32(max_events))
        run = Run(*args, col_reps, *counts, B, False, dt, reps is None, tied)
        if parts:
            tell = lambda k, n, label=label: progress(f"{label}: {k}/{n} jobs ({k / n:.0%})")  # noqa: E731
            out = _run_parts(pol, workload, run, init, tell)
        else:
            out = _run(pol, workload, run, init, jobs)
        st = jax.tree.map(to_host, out)
        part = st.acc
        acc = part if acc is None else jax.tree.map(functools.partial(_merge, rows=todo), acc, part)
        overflow[todo], capped[todo] = st.overflow, st.events >= max_events
        buffers[todo] = B
        if not st.overflow.any() or 2 * B > max_buffer:
            return acc, overflow, capped, buffers
        # go on with the replications that filled their buffer, twice the slots
        over = st.overflow
        todo, B = todo[over], 2 * B
        init = _grow(_select(st, over), B)


def _select(st: _State, rows) -> _State:
    """The replications ``rows`` (a mask) of a state on the host."""
    D, R = st.q.head.shape
    body = np.asarray(st.q.body).reshape(D, -1, R, st.q.width)[:, :, rows].reshape(-1)
    st = st._replace(q=st.q._replace(body=np.zeros((1, R))))
    st = jax.tree.map(lambda x: np.asarray(x)[..., rows], st)
    return st._replace(q=st.q._replace(body=body))


def _grow(st: _State, B: int) -> _State:
    """The state with deques of ``B`` entries (each laid out from its front, the new entries
    empty; with every job in a row, ``B`` rows) and the overflow flags cleared."""
    q = st.q
    if q.all_rows:  # the rows are the buffer
        pad = lambda x: np.concatenate([x, np.zeros((B - x.shape[0], *x.shape[1:]), x.dtype)])  # noqa: E731
        rows = ("s_arr", "s_info", "s_wait", "s_size", "s_est")
        grown = {f: pad(np.asarray(getattr(q, f))) for f in rows if getattr(q, f) is not None}
        q = q._replace(s_end=pad(np.asarray(q.s_end)), **grown)
        return st._replace(q=q, overflow=np.zeros_like(st.overflow))
    D, R = q.head.shape
    Q = q.capacity
    W = q.width
    body = np.asarray(q.body).reshape(D, Q, R, W)
    ring = (np.asarray(q.head)[:, None, :] + np.arange(Q)[None, :, None]) % Q  # (D, Q, R)
    body = np.take_along_axis(body, ring[..., None], axis=1)
    body = np.concatenate([body, np.zeros((D, B - Q, R, W), body.dtype)], axis=1)
    q = q._replace(body=body.reshape(-1), head=np.zeros_like(q.head))
    return st._replace(q=q, overflow=np.zeros_like(st.overflow))


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
    check_workload(workload)
    dt = _float(dtype)
    W = pol.lookahead or 1
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
    st = _run(pol, workload, Run(*args, jnp.int32(4 * n_jobs + 64 * B), B, True, dt))
    done = np.full(n_replications, float(n_jobs - warmup))
    m, ci = _ratio_ci(done, np.asarray(st.acc.time), level)
    return float(m), (float(ci[0]), float(ci[1]))


#: The former name of :func:`simulate` (policy ``"fcfs"`` by default, as there).
simulate_policy = simulate
