"""The event engine: batched event simulation of the MJQM under any job-list policy.

All replications advance together in one ``lax.while_loop``, one event each per round (an
arrival or a completion, whichever comes first), in ``(slots, replications)`` arrays sharded
over devices on the replication axis like the forward scan. The state is a fixed buffer of
``B`` job slots in arrival order (:class:`~jaxqueue.mjqm.policies.Jobs`): class, need,
remaining work, age, age at the first start. At every event the clock moves by ``dt``, the
remaining work of the jobs in service and the ages of all jobs advance, the event is applied
(a completion leaves and the later slots shift down; an arrival fills the next slot, drawn from
the counter-based inputs of ``_inputs.py``, so job ``n`` of replication ``r`` is the same job
as in the MJSRE simulators), and the policy chooses the jobs in service (``policy.select``).
Times are kept relative (ages and remaining work), so float32 runs do not lose digits as the
clock grows.

Measured: the jobs ``warmup .. n_jobs - 1`` of each replication, until every one of them has
left (arrivals go on meanwhile); time averages over the arrivals of those jobs. An arrival that
finds the buffer full is an overflow (never used silently): the replications that overflowed
run again with twice the slots, up to ``max_buffer``, and beyond it the status is
``overflow``.
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
from jaxtyping import Array, PRNGKeyArray

from .._sharding import batch_devices, batch_mesh, shard_batch, to_host
from ..stats import Estimate, drift
from ._forward import MIN_EFFECTIVE, _effective_jobs, _ratio_ci
from ._inputs import draw_jobs_each, replication_keypairs
from ._workload import Workload
from .policies import EventPolicy, Jobs, parse_policy
from .policies._base import at_slot, first_slot, positions

__all__ = ["PolicyResult", "simulate_policy", "saturated_throughput"]


class _Acc(NamedTuple):
    """Per-replication sums: per class ``(K,)`` response, response^2, wait, wait^2, count;
    second-half response and count (drift check); time integrals of jobs, idle servers, idle
    servers while someone waits, and the window length; departures (saturated runs)."""

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


class _State(NamedTuple):
    jobs: Jobs  # the buffers, (B, R), in arrival order
    code: Array  # (B, R) 0: not measured (warm-up, or after n_jobs), 1: first half, 2: second
    to_arrival: Array  # (R,) time until the next arrival
    n_next: Array  # (R,) index of the next arriving job
    acc: _Acc
    overflow: Array  # (R,)
    events: Array  # (R,)


def _empty(B: int, R: int, K: int, dt) -> _State:
    z = jnp.zeros((B, R), dt)
    zi = jnp.zeros((B, R), jnp.int32)
    zb = jnp.zeros((B, R), bool)
    i0 = jnp.zeros(R, jnp.int32)
    jobs = Jobs(cls=zi, need=zi, rem=z, age=z, wait=z, started=zb, run=zb, count=i0)
    zk = jnp.zeros((K, R), dt)
    z0 = jnp.zeros(R, dt)
    acc = _Acc(zk, zk, zk, zk, zk, z0, z0, z0, z0, z0, z0, z0)
    return _State(jobs, zi, z0, i0, acc, jnp.zeros(R, bool), i0)


def _record(acc: _Acc, jobs: Jobs, code, j, leaves) -> _Acc:
    """Add the response and wait of the job leaving slot ``j`` where it is a measured one."""
    c = at_slot(code, j)
    dt = acc.resp.dtype
    K = acc.resp.shape[0]
    one = ((jnp.arange(K)[:, None] == at_slot(jobs.cls, j)) & (c > 0) & leaves).astype(dt)
    r, w = at_slot(jobs.age, j), at_slot(jobs.wait, j)
    late = leaves & (c == 2)
    return acc._replace(
        resp=acc.resp + one * r,
        resp2=acc.resp2 + one * r * r,
        wait=acc.wait + one * w,
        wait2=acc.wait2 + one * w * w,
        cnt=acc.cnt + one,
        late_resp=acc.late_resp + jnp.where(late, r, 0),
        late_cnt=acc.late_cnt + late,
        done=acc.done + leaves,
    )


def _integrate(acc: _Acc, jobs: Jobs, s, dt, inside) -> _Acc:
    """Time integrals over ``dt`` where ``inside`` the measuring window."""
    d = jnp.where(inside, dt, 0)
    idle = jobs.free(s).astype(dt.dtype)
    someone_waits = jnp.any(jobs.waiting, axis=0)
    return acc._replace(
        area_jobs=acc.area_jobs + d * jobs.count,
        area_idle=acc.area_idle + d * idle,
        area_hol=acc.area_hol + d * idle * someone_waits,
        time=acc.time + d,
    )


def _shift(x, after):
    """Slots at and after a leaving job take the next slot's value (a static slice); the last
    slot empties (no state of a job that left stays behind, e.g. in service)."""
    return jnp.where(after, jnp.concatenate([x[1:], jnp.zeros_like(x[-1:])]), x)


def _put(x, at, v):
    return jnp.where(at, jnp.asarray(v).astype(x.dtype), x)


def _event(policy, workload, s, needs, saturated, lam, keypairs, warmup, n_jobs, active, st):
    """One event of every ``active`` replication: its next completion or arrival, then the
    policy; the others stand still."""
    jobs, code, count = st.jobs, st.code, st.jobs.count
    B = code.shape[0]
    pos = positions(code)
    ends = jnp.where(jobs.run, jobs.rem, jnp.inf)
    end = jnp.min(ends, axis=0)
    j = first_slot(ends == end)
    if saturated:  # topped up at once; measured over the departures warmup .. n_jobs
        to_arrival = jnp.where(count >= B, jnp.inf, 0.0).astype(st.to_arrival.dtype)
        inside = st.acc.done >= warmup
    else:  # measured over the arrivals of the jobs warmup .. n_jobs - 1
        to_arrival = st.to_arrival
        inside = (st.n_next > warmup) & (st.n_next <= n_jobs)
    # an arrival that finds the buffer full stops its replication before the event, so that it
    # can go on from there with more slots (``_runs``)
    blocked = active & (to_arrival < end) & (count >= B)
    active = active & ~blocked
    leaves = active & (end <= to_arrival)
    arrives = active & ~leaves
    dt = jnp.where(active, jnp.minimum(end, to_arrival), 0)
    acc = _integrate(st.acc, jobs, s, dt, inside)
    jobs = jobs._replace(
        rem=jnp.where(jobs.run, jobs.rem - dt, jobs.rem),
        age=jnp.where(jobs.live, jobs.age + dt, jobs.age),
    )
    # a completion: slot j empties and the later slots shift down
    acc = _record(acc, jobs, code, j, leaves)
    after = leaves & (pos >= j)
    jobs = Jobs(*(_shift(x, after) for x in jobs[:-1]), count=count - leaves)
    code = _shift(code, after)
    # an arrival: job n_next takes the slot after the last job
    n = st.n_next
    job = draw_jobs_each(workload, lam, keypairs, n, dtype=jobs.rem.dtype)
    at = arrives & (pos == count)
    mid = (warmup + n_jobs) // 2
    jobs = jobs._replace(
        cls=_put(jobs.cls, at, job.cls),
        need=_put(jobs.need, at, job.alpha[..., 0]),
        rem=_put(jobs.rem, at, job.sigma),
        age=_put(jobs.age, at, 0),
        wait=_put(jobs.wait, at, 0),
        started=_put(jobs.started, at, False),
        count=jobs.count + arrives,
    )
    code = _put(code, at, jnp.where((n >= warmup) & (n < n_jobs), 1 + (n >= mid), 0))
    # the policy
    run = policy.select(jobs, s, needs)
    first = run & ~jobs.started
    jobs = jobs._replace(
        run=run, started=jobs.started | run, wait=jnp.where(first, jobs.age, jobs.wait)
    )
    gap = jnp.zeros_like(dt) if saturated else job.tau.astype(dt.dtype)
    return _State(
        jobs=jobs,
        code=code,
        to_arrival=jnp.where(leaves, to_arrival - dt, jnp.where(arrives, gap, st.to_arrival)),
        n_next=n + arrives,
        acc=acc,
        overflow=st.overflow | blocked,
        events=st.events + active,
    )


@eqx.filter_jit
def _run(
    policy, workload, lam, key, reps, warmup, n_jobs, max_events, B, saturated, dtype, init=None
):
    """Every replication of ``reps`` until its measured jobs have left (or an arrival finds its
    buffer full, or ``max_events``), all replications side by side in ``(B, R)`` arrays
    (replications minor: the reductions over the slots then run across SIMD lanes), from
    ``init`` (default: empty). ``saturated``: the queue is topped up to ``B`` jobs at once (no
    arrival process), for the throughput of the saturated system."""
    s, K = workload.s, workload.n_classes
    needs = tuple(sorted({int(a) for a in workload.cores_array[:, 0]}, reverse=True))
    keypairs = replication_keypairs(key, reps)
    target = n_jobs - warmup

    def active(st):
        done = st.acc.done >= n_jobs if saturated else jnp.sum(st.acc.cnt, axis=0) >= target
        return ~done & ~st.overflow & (st.events < max_events)

    def step(st):
        return _event(
            policy, workload, s, needs, saturated, lam, keypairs, warmup, n_jobs, active(st), st
        )

    st = _empty(B, reps.shape[0], K, dtype) if init is None else init
    return lax.while_loop(lambda st: jnp.any(active(st)), step, st)


class PolicyResult(eqx.Module):
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
        status: ``"ok"``, ``"overflow"`` (an arrival found the job buffer full at
            ``max_buffer``), ``"nonstationary"`` (the second half of the measured jobs stays
            significantly longer than the first, the event cap was reached, or the run is too
            short to tell: ``n_eff < MIN_EFFECTIVE``), ``"unconverged"`` (a class with
            positive probability measured in fewer than 2 replications: no interval).
        drift: relative increase of the mean response time from the first to the second half.
        n_eff: effective independent responses per replication (``_forward._effective_jobs``,
            the rule of the forward scan started empty); below its ``MIN_EFFECTIVE`` the run is
            too short to judge and the status is ``nonstationary``.
        buffer: job slots per replication. n_jobs, warmup, replications: the run's size.
        limit: ``(method, lambda_c, (low, high))`` of the policy (``None`` values when no
            method is known).
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
    status: str
    drift: float
    n_eff: float
    buffer: int
    n_jobs: int
    warmup: int
    replications: int
    limit: tuple

    def as_dict(self, workload: Workload) -> dict:
        """The JSON object of ``jaxqueue mjqm simulate --policy NAME --json``: the keys of
        ``mjqm simulate`` that the event engine measures, plus
        ``response_mean``, ``response_mean_ci`` (overall and per class) and the policy's
        stability limit. ``wait_p90`` is ``None`` (no per-job histogram in the engine)."""
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
                    "wait_p90": None,
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
            "wait_p90": None,
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
    policy, lam, probs, acc, overflow, capped, B, n_jobs, warmup, level, limit
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
    thin = bool(np.any((np.asarray(probs) > 0) & (seen < 2)))
    if overflow:
        status = "overflow"
    elif growing or capped or too_short:
        status = "nonstationary"
    else:
        status = "unconverged" if thin else "ok"
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
    )


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
    policy: str | EventPolicy = "fcfs",
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
        buffer: job slots per replication to start with (default: the most jobs in service
            and 8 more, rounded up to a power of 2, at least 16); the replications that
            overflow run again with twice the slots, up to ``max_buffer``.
        level: confidence level. dtype: float dtype (default float64 under x64).
        progress: optional ``callable(str)`` told of each run once the arguments are checked.
        devices: devices to shard the replications over (default ``jax.devices()``; the
            largest count dividing the replications run is used; results do not depend on it).
        limit: the policy's ``stability_limit`` if already known (a sweep computes it once).

    Returns:
        :class:`PolicyResult`.

    Raises:
        ValueError: a bad argument, a workload with several resource types or specific
            servers, or (without ``override``) ``lam`` at or beyond a known limit.
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
    return _summarise(pol.label, lam, probs, acc, overflow, capped, B, n_jobs, warmup, level, limit)


def _runs(pol, workload, lam, key, sizes, buffer, max_buffer, dt, devices=None, progress=None):
    """The kernel over every replication. Those whose buffer fills go on from where they
    stopped with twice the slots (an arrival that finds the buffer full stops its replication
    before the event), so the result is that of a run with the larger buffer from the start.
    Returns the per-replication sums, whether any still overflowed at ``max_buffer``, whether
    any hit the event cap, and the last buffer size. ``sizes``: ``(replications, warmup,
    jobs)``."""
    n_replications, warmup, n_jobs = sizes
    B = buffer or _first_buffer(workload)
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
        # go on with the replications that filled their buffer, twice the slots, unsharded
        over = st.overflow
        todo, B = todo[over], 2 * B
        reps = jnp.asarray(todo, jnp.int32)
        init = _grow(jax.tree.map(lambda x, over=over: x[..., over], st), B)


def _grow(st: _State, B: int) -> _State:
    """The state with ``B`` slots (the new ones empty) and the overflow flags cleared."""

    def pad(x):
        return np.concatenate([x, np.zeros((B - x.shape[0],) + x.shape[1:], x.dtype)])

    jobs = Jobs(*(pad(x) for x in st.jobs[:-1]), count=st.jobs.count)
    return st._replace(jobs=jobs, code=pad(st.code), overflow=np.zeros_like(st.overflow))


def _first_buffer(workload: Workload) -> int:
    """Job slots to start with: the most jobs in service and 8 more, rounded up to a power of
    2, at least 16 (the cost of an event grows with the slots; the replications that overflow
    run again with more)."""
    most = workload.s // int(np.min(workload.cores_array[:, 0]))
    return max(16, 1 << math.ceil(math.log2(most + 8)))


def _merge(full, part, *, rows):
    """Write the replications ``rows`` (the last axis) of ``part`` into ``full``."""
    out = np.array(full, copy=True)
    out[..., rows] = part
    return out


def saturated_throughput(
    workload: Workload,
    policy: str | EventPolicy,
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
