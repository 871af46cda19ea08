"""The JAX kernel: one replication of the interruption scheduler as a jump chain.

Model (``bf-clusters`` Section 2 and Algorithm 1 of Section 4). Jobs wait in a single
virtual queue in order. Each server serves the oldest job of the queue that it may serve, so a
job's service rate is the sum of the capacities of the servers for which it is the oldest
compatible job. Job sizes are mixtures of sums of exponential phases
(``jaxqueue.dist._phase``), so the state (the queue order, each job's servers, remaining phases
and phase rate) is a continuous-time Markov chain. Its jumps:

* arrival of a class-i job, rate ``lam_i``: appended at the end of the queue (its number of
  phases and phase rate drawn from the mixture; for random assignment its d servers drawn
  uniformly, Floyd's algorithm);
* end of a phase of job k, rate ``r_k nu_k`` (``r_k`` its service rate, ``nu_k`` the phase rate
  per unit of work); the job leaves after its last phase;
* interruption of job k, rate ``r_k alpha`` with ``alpha = 1 / theta``: each busy server s
  interrupts at rate ``C_s / theta`` and an interruption releases all the job's servers, so the
  job's interruption rate is ``sum_s C_s / theta = r_k / theta``. The job moves to the END of
  the queue, keeping its remaining phases. ``alpha = 0`` is FCFS (theta = infinity).

The kernel simulates the embedded jump chain (Gillespie): at each jump the next event is drawn
with probabilities proportional to the rates, and the time-averages use the conditional mean
holding time ``1 / R`` of the state (R the total rate), an unbiased and lower-variance
replacement of the sampled exponential holding time. Per-class time-averaged numbers of jobs
``L_i = sum_t x_i(t) / R(t) / sum_t 1 / R(t)`` give the delays of eq. (9) by Little's law.

Two layouts of the same chain (the same jumps from the same uniforms, tested equal):

* **class queues** (class pools, :func:`_fifo_step`): the job a server serves is the oldest job
  of its own class (an older job of the same class would list the same server), so every event
  touches the head of one class: a first-in first-out ring per class (interrupted jobs go back
  to the tail of their class with a new stamp) and the heads' stamps decide each server's job.
  A jump costs O(N S) for N classes and S servers, whatever the number of jobs held;
* **job slots** (random assignment, :func:`_slot_step`): every job stores its own d servers, so
  a freed server looks for the oldest job listing it among the Q slots, O(Q d) per jump.

Static buffers: the queue holds at most ``queue_size`` jobs; an arrival into a full buffer is
dropped and COUNTED in ``overflow`` (the caller refuses results with overflow > 0).

Random numbers: per chunk of ``chunk`` jumps, 32 random bits per uniform from
``fold_in(key, chunk_index)`` (threefry), an even number per jump (a threefry block gives two
words): 2 for class pools with one exponential phase, ``3 + d`` rounded up otherwise. Measured
on the 2-core CPU: threefry float64 uniforms (64 bits each, three per jump) alone capped the
kernel at about 11 M jumps/s; two 32-bit words per jump at about 60 M.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

__all__ = ["KernelParams", "KernelSpec", "ChainStats", "run_chain"]


class KernelSpec(eqx.Module):
    """Static sizes of the kernel (one compilation per spec).

    Attributes:
        queue_size: Q, the maximum number of jobs held (buffer length).
        n_servers: S (the padding server index is S, of capacity 0).
        width: D, servers stored per job (max class degree, or d for random assignment).
        n_classes: N (1 for random assignment).
        random_d: d for random assignment, 0 for class pools.
        single_phase: every job is one exponential phase of one rate (the class queues then
            hold only the jobs' stamps).
        chunk: jumps per block of random numbers.
    """

    queue_size: int = eqx.field(static=True)
    n_servers: int = eqx.field(static=True)
    width: int = eqx.field(static=True)
    n_classes: int = eqx.field(static=True)
    random_d: int = eqx.field(static=True)
    single_phase: bool = eqx.field(static=True)
    chunk: int = eqx.field(static=True)

    @property
    def class_queues(self) -> bool:
        """Class pools small enough for the class-queue layout (O(N S) per jump)."""
        return (
            self.random_d == 0 and self.n_classes <= 16 and self.n_classes * self.n_servers <= 1024
        )

    @property
    def n_uniforms(self) -> int:
        """Uniforms per jump: event, phase (and mixture component, then d servers), even."""
        n = 2 if (self.class_queues and self.single_phase) else 3 + self.random_d
        return n + n % 2


class KernelParams(eqx.Module):
    """Traced parameters (vmappable over sweep points).

    Attributes:
        lam: arrival rate per class, shape (N,) (total rate for random assignment, N = 1).
        mu_ext: server capacities with a trailing 0 for the padding server, shape (S + 1,).
        class_servers: servers of each class padded with S, shape (N, D) (unused if random).
        alpha: interruption rate per unit of work, ``1 / theta`` (0 for FCFS).
        comp_counts: phases of each mixture component, shape (J,).
        comp_rate_idx: index of each component's phase rate in ``rate_table``, shape (J,).
        comp_cdf: cumulative component probabilities, shape (J,).
        rate_table: the distinct phase rates (per unit of work), shape (U,).
    """

    lam: Float[Array, " N"]
    mu_ext: Float[Array, " S1"]
    class_servers: Int[Array, "N D"]
    alpha: Float[Array, ""]
    comp_counts: Int[Array, " J"]
    comp_rate_idx: Int[Array, " J"]
    comp_cdf: Float[Array, " J"]
    rate_table: Float[Array, " U"]


class ChainStats(eqx.Module):
    """Measured totals of one replication (after warm-up).

    Attributes:
        time: total expected time ``sum 1 / R``.
        area: per-class ``sum x_i / R`` (so ``L_i = area_i / time``).
        busy: ``sum (total service rate) / R`` (mean busy capacity times ``time``).
        arrivals, departures, interruptions: event counts in the measured jumps.
        overflow: arrivals dropped because the buffer was full (warm-up included).
        n_max: the largest number of jobs seen (warm-up included).
        n_final: number of jobs at the end.
        time_first, area_first: ``time`` and ``area`` over the first ``floor(J / 2)`` of the J
            measured jumps, whatever the chunking (the stationarity check compares the halves).
        area_sq: ``sum n^2 / R`` for the total number of jobs n (its time-averaged variance
            within the run is ``area_sq / time - (sum(area) / time)^2``).
    """

    time: Float[Array, ""]
    area: Float[Array, " N"]
    busy: Float[Array, ""]
    arrivals: Int[Array, ""]
    departures: Int[Array, ""]
    interruptions: Int[Array, ""]
    overflow: Int[Array, ""]
    n_max: Int[Array, ""]
    n_final: Int[Array, ""]
    time_first: Float[Array, ""]
    area_first: Float[Array, " N"]
    area_sq: Float[Array, ""]


def _draw_servers(u: Float[Array, " d"], n_servers: int, d: int) -> Int[Array, " d"]:
    """d distinct servers uniformly among n_servers (Floyd's algorithm, d uniforms)."""
    chosen = []
    for step, j in enumerate(range(n_servers - d, n_servers)):
        t = jnp.minimum((u[step] * (j + 1)).astype(jnp.int32), j)
        dup = jnp.zeros((), bool)
        for c in chosen:
            dup = dup | (c == t)
        chosen.append(jnp.where(dup, j, t))
    return jnp.stack(chosen)


_EMPTY = jnp.iinfo(jnp.int32).max  # stamp of a free slot


def _draw_event(params: KernelParams, srv_rate, busy, count, u0):
    """The next event of the jump chain (Gillespie) and the state's measured terms.

    Events ``0 .. N - 1`` are arrivals of class i (rate ``lam_i``), ``N + s`` the event of server
    s (rate ``srv_rate[s]``, 0 if idle): the first whose cumulated rate exceeds ``u0 R``. The
    terms are weighted by the mean holding time ``1 / R``: ``(1 / R, count / R, busy capacity /
    R, n^2 / R)`` with ``count`` the jobs of each class and ``n`` their total.
    """
    N, S = params.lam.shape[0], srv_rate.shape[0]
    dtype = params.mu_ext.dtype
    cum = jnp.cumsum(jnp.concatenate([params.lam, srv_rate]))
    total = cum[-1]
    idx = jnp.minimum(jnp.sum(cum <= u0 * total).astype(jnp.int32), N + S - 1)
    hold = 1.0 / total
    n_tot = jnp.sum(count).astype(dtype)
    mu = params.mu_ext[:S]
    stats = (
        hold,
        count.astype(dtype) * hold,
        jnp.sum(jnp.where(busy, mu, 0.0)) * hold,
        n_tot * n_tot * hold,
    )
    return idx, stats


def _slot_step(spec: KernelSpec, params: KernelParams, state, u):
    """One jump of the chain.

    Layout (no row ever moves, so a jump costs O(Q D) instead of O(Q S)): ``jobs[q]`` holds the
    D servers, remaining phases, class and phase-rate index of the job in slot q; ``stamp[q]``
    its place in the queue order (arrival or re-entry counter; free slots hold the largest
    int32); ``owner[s]`` the slot served by server s (Q if idle); ``free`` a stack of free
    slots. Invariant (Algorithm 1): ``owner[s]`` is the slot of smallest stamp among the jobs
    that list s, so the rate of server s goes to its job: the event is drawn among the
    arrivals and the busy servers (server s triggers its job's next event at rate
    ``mu_s (nu + alpha)``, which sums to ``r_k (nu_k + alpha)`` over the job's servers).
    Kept in one piece: it is one jump of Algorithm 1 (the event drawn, then the job event and
    the arrival, both applied with masks), and it is the hot loop of the scheduler.
    """
    jobs, stamp, owner, free, n, next_stamp, count = state
    Q, S, N, D = spec.queue_size, spec.n_servers, spec.n_classes, spec.width
    dtype = params.mu_ext.dtype
    mu = params.mu_ext[:S]
    sidx = jnp.arange(S, dtype=jnp.int32)

    busy = owner < Q
    slot_of = jnp.minimum(owner, Q - 1)
    n_rates = params.rate_table.shape[0]
    if n_rates == 1:
        nu_s = params.rate_table[0]
    else:
        nu_s = params.rate_table[jobs[slot_of, D + 2]]
    srv_rate = jnp.where(busy, mu * (nu_s + params.alpha), 0.0)
    idx, stats = _draw_event(params, srv_rate, busy, count, u[0])

    # --- job event: phase end, departure or interruption of the job in slot k
    is_arr = idx < N
    s_sel = jnp.clip(idx - N, 0, S - 1)
    k = slot_of[s_sel]
    job_ok = (~is_arr) & busy[s_sel]
    row_k = jobs[k]
    nu_k = params.rate_table[0] if n_rates == 1 else params.rate_table[row_k[D + 2]]
    phase = u[1] * (nu_k + params.alpha) < nu_k
    done = job_ok & phase
    depart = done & (row_k[D] == 1)
    interrupt = job_ok & ~phase
    leave = depart | interrupt
    new_left = row_k[D] - done.astype(jnp.int32)
    empty_row = jnp.concatenate([jnp.full((D,), S, jnp.int32), jnp.zeros((3,), jnp.int32)])
    row_k_new = jnp.where(depart, empty_row, row_k.at[D].set(new_left))
    jobs = jobs.at[k].set(row_k_new)
    stamp_k = jnp.where(depart, _EMPTY, jnp.where(interrupt, next_stamp, stamp[k]))
    stamp = stamp.at[k].set(stamp_k)
    next_stamp = next_stamp + interrupt.astype(jnp.int32)
    freed = leave & (owner == k)
    owner = jnp.where(freed, Q, owner)
    # the freed servers go to the oldest job listing them (the interrupted job included)
    srv = jobs[:, :D]
    for a in range(D):
        s = row_k[a]
        match = jnp.any(srv == s, axis=1)
        order = jnp.where(match, stamp, _EMPTY)
        j = jnp.argmin(order).astype(jnp.int32)
        take = (sidx == s) & freed & (order[j] < _EMPTY)
        owner = jnp.where(take, j, owner)
    free = free.at[Q - n].set(jnp.where(depart, k, free[Q - n]), mode="drop")

    # --- arrival (of class c) into a free slot, if any
    c = jnp.clip(idx, 0, N - 1)
    arr_ok = is_arr & (n < Q)
    overflow = is_arr & (n >= Q)
    slot = free[jnp.clip(Q - n - 1, 0, Q - 1)]
    comp = jnp.minimum(jnp.sum(params.comp_cdf < u[2]).astype(jnp.int32), params.comp_cdf.size - 1)
    if spec.random_d:
        new_servers = _draw_servers(u[3 : 3 + spec.random_d], S, spec.random_d)
    else:
        new_servers = params.class_servers[c]
    new_job = jnp.concatenate(
        [new_servers, jnp.stack([params.comp_counts[comp], c, params.comp_rate_idx[comp]])]
    ).astype(jnp.int32)
    jobs = jobs.at[slot].set(jnp.where(arr_ok, new_job, jobs[slot]))
    stamp = stamp.at[slot].set(jnp.where(arr_ok, next_stamp, stamp[slot]))
    next_stamp = next_stamp + arr_ok.astype(jnp.int32)
    for a in range(D):
        owner = jnp.where((sidx == new_servers[a]) & (owner == Q) & arr_ok, slot, owner)

    count = count + ((jnp.arange(N) == c) & arr_ok) - ((jnp.arange(N) == row_k[D + 1]) & depart)
    n = n + arr_ok.astype(n.dtype) - depart.astype(n.dtype)
    events = jnp.stack([arr_ok, depart, interrupt, overflow]).astype(dtype)
    return (jobs, stamp, owner, free, n, next_stamp, count), (stats, events, n)


def _slot_state(spec: KernelSpec, dtype):
    Q, D, N, S = spec.queue_size, spec.width, spec.n_classes, spec.n_servers
    jobs = jnp.zeros((Q, D + 3), jnp.int32).at[:, :D].set(S)
    return (
        jobs,
        jnp.full((Q,), _EMPTY, jnp.int32),
        jnp.full((S,), Q, jnp.int32),
        jnp.arange(Q, dtype=jnp.int32)[::-1],
        jnp.zeros((), jnp.int32),
        jnp.zeros((), jnp.int32),
        jnp.zeros((N,), jnp.int32),
    )


def _fifo_state(spec: KernelSpec, dtype):
    """Empty class queues: ``ring[f]`` of shape (N, Q) for the fields stamp (then remaining
    phases and phase-rate index unless ``single_phase``), ``head`` and ``size`` per class, the
    next stamp and the number of jobs."""
    Q, N = spec.queue_size, spec.n_classes
    fields = 1 if spec.single_phase else 3
    ring = (jnp.full((N, Q), _EMPTY, jnp.int32),) + (jnp.zeros((N, Q), jnp.int32),) * (fields - 1)
    zeros = jnp.zeros((N,), jnp.int32)
    return ring, zeros, zeros, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)


def _oldest_class(compat, hs):
    """For each server, the class whose head is the oldest job it may serve, and that job's
    stamp (``_EMPTY`` if none): ``compat`` (N, S), ``hs`` (N,) head stamps."""
    keyed = jnp.where(compat, hs[:, None], _EMPTY)
    best, own = keyed[0], jnp.zeros(keyed.shape[1], jnp.int32)
    for c in range(1, keyed.shape[0]):  # N <= 16: unrolled (argmin is slower on the CPU)
        better = keyed[c] < best
        best, own = jnp.where(better, keyed[c], best), jnp.where(better, c, own)
    return own, best


def _fifo_step(spec: KernelSpec, params: KernelParams, compat, state, u):
    """One jump of Algorithm 1 on class queues (module docstring): the same event, drawn from
    the same uniforms, as :func:`_slot_step` on the same pool.

    Server s serves the head of class ``own[s]``, the compatible class whose head is oldest;
    the event of server s ends a phase of that job (probability ``nu / (nu + alpha)``; the job
    leaves after its last) or interrupts it (it goes to the tail of its class, new stamp).
    """
    ring, head, size, next_stamp, n = state
    Q, S, N = spec.queue_size, spec.n_servers, spec.n_classes
    dtype = params.mu_ext.dtype
    mu = params.mu_ext[:S]
    cidx = jnp.arange(N)
    hs = jnp.where(size > 0, ring[0][cidx, head], _EMPTY)
    own, best = _oldest_class(compat, hs)
    busy = best < _EMPTY
    if spec.single_phase:
        nu_c = jnp.broadcast_to(params.rate_table[0], (N,))
    else:
        rate_idx = ring[2][cidx, head]  # phase-rate index of each class's head
        nu_c = params.rate_table[rate_idx]
    srv_rate = jnp.where(busy, mu * (nu_c[own] + params.alpha), 0.0)
    idx, stats = _draw_event(params, srv_rate, busy, size, u[0])

    is_arr = idx < N
    s_sel = jnp.clip(idx - N, 0, S - 1)
    ck = own[s_sel]  # the class whose head has the event
    job_ok = (~is_arr) & busy[s_sel]
    nu_k = nu_c[ck]
    phase = u[1] * (nu_k + params.alpha) < nu_k
    done = job_ok & phase
    left = 1 if spec.single_phase else ring[1][ck, head[ck]]
    depart = done & (left == 1)
    interrupt = job_ok & ~phase
    leave = depart | interrupt
    c = jnp.clip(idx, 0, N - 1)
    arr_ok = is_arr & (n < Q)
    overflow = is_arr & (n >= Q)

    # one write per field: an arrival or an interrupted job at the tail of its class, or a
    # phase end (not the last) at the head of class ck
    wc = jnp.where(is_arr, c, ck)
    push = arr_ok | interrupt
    at = jnp.where(push, (head[wc] + size[wc]) % Q, head[ck])
    at = jnp.where(push | done, at, Q)  # Q: out of range, dropped
    vals = [jnp.where(push, next_stamp, hs[ck])]
    if not spec.single_phase:
        comp = jnp.minimum(
            jnp.sum(params.comp_cdf < u[2]).astype(jnp.int32), params.comp_cdf.size - 1
        )
        vals.append(jnp.where(is_arr, params.comp_counts[comp], left - done.astype(jnp.int32)))
        vals.append(jnp.where(is_arr, params.comp_rate_idx[comp], rate_idx[ck]))
    ring = tuple(r.at[wc, at].set(v, mode="drop") for r, v in zip(ring, vals, strict=True))
    on_k = cidx == ck
    head = jnp.where(on_k & leave, (head + 1) % Q, head)
    size = size + ((cidx == wc) & push) - (on_k & leave)
    next_stamp = next_stamp + push.astype(jnp.int32)
    n = n + arr_ok.astype(n.dtype) - depart.astype(n.dtype)
    events = jnp.stack([arr_ok, depart, interrupt, overflow]).astype(dtype)
    return (ring, head, size, next_stamp, n), (stats, events, n)


def _uniforms(key, shape, dtype):
    """Uniforms in [0, 1) from 32 random bits each (24 in float32, so that none rounds to 1)."""
    bits = jax.random.bits(key, shape, dtype=jnp.uint32)
    if jnp.finfo(dtype).nmant < 32:
        return (bits >> 8).astype(dtype) * (2.0**-24)
    return bits.astype(dtype) * (2.0**-32)


def _layout(spec: KernelSpec, params: KernelParams):
    """``(step(state, u), initial state)`` of the layout that suits the pool."""
    if spec.class_queues:
        S = spec.n_servers
        compat = jnp.any(params.class_servers[:, :, None] == jnp.arange(S)[None, None, :], axis=1)
        return (
            lambda state, u: _fifo_step(spec, params, compat, state, u),
            _fifo_state(spec, params.mu_ext.dtype),
        )
    return (
        lambda state, u: _slot_step(spec, params, state, u),
        _slot_state(spec, params.mu_ext.dtype),
    )


def run_chain(spec: KernelSpec, params: KernelParams, key, n_warm, n_chunks) -> ChainStats:
    """Simulate one replication: ``n_warm`` then ``n_chunks`` blocks of ``spec.chunk`` jumps.

    Starts empty; the warm-up jumps are simulated but not measured. Pure and jittable; vmap it
    over keys (replications) and over ``params`` (sweep points). The block counts are traced
    (a ``while`` loop), so run lengths do not trigger recompilation. The measured totals are
    accumulated as one vector per block (one fused add per jump).

    Args:
        spec: static sizes.
        params: traced rates, capacities, interruption rate and job-size mixture.
        key: PRNG key of this replication.
        n_warm: warm-up blocks (int scalar, may be traced).
        n_chunks: measured blocks (int scalar, may be traced).

    Returns:
        ``ChainStats`` of the measured jumps.
    """
    dtype = params.mu_ext.dtype
    N = spec.n_classes
    step, state0 = _layout(spec, params)
    width = 4 + 2 * N + 4  # time, busy, area_sq, time_first | area, area_first | events

    def jump(carry, xs):
        state, acc, n_max, _ = carry
        u, first = xs
        state, ((hold, area, busy, area_sq), events, n) = step(state, u)
        add = jnp.concatenate(
            [jnp.stack([hold, busy, area_sq, first * hold]), area, first * area, events]
        )
        return (state, acc + add, jnp.maximum(n_max, n), n), None

    # the first half is the first floor(J / 2) of the J = n_chunks * chunk measured jumps,
    # however the run is chunked (a run of one chunk included)
    half = (n_chunks * spec.chunk) // 2
    steps = jnp.arange(spec.chunk, dtype=jnp.int32)
    zero = jnp.zeros((width,), dtype)

    def block(c, carry):
        state, total, events, n_max, n = carry
        u = _uniforms(jax.random.fold_in(key, c), (spec.chunk, spec.n_uniforms), dtype)
        first = (steps < jnp.clip(half - (c - n_warm) * spec.chunk, 0, spec.chunk)).astype(dtype)
        (state, acc, n_max, n), _ = jax.lax.scan(jump, (state, zero, n_max, n), (u, first))
        on = c >= n_warm
        counts = acc[-4:].astype(jnp.int32)  # exact: at most chunk per block
        counts = counts * jnp.array([on, on, on, True], jnp.int32)  # overflow: warm-up included
        return state, total + on.astype(dtype) * acc[:-4], events + counts, n_max, n

    i32 = jnp.zeros((), jnp.int32)
    init = (state0, zero[:-4], jnp.zeros((4,), jnp.int32), i32, i32)
    _, tot, ev, n_max, n = jax.lax.fori_loop(0, n_warm + n_chunks, block, init)
    return ChainStats(
        time=tot[0],
        area=tot[4 : 4 + N],
        busy=tot[1],
        arrivals=ev[0],
        departures=ev[1],
        interruptions=ev[2],
        overflow=ev[3],
        n_max=n_max,
        n_final=n,
        time_first=tot[3],
        area_first=tot[4 + N : 4 + 2 * N],
        area_sq=tot[2],
    )
