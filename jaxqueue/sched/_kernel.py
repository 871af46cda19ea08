"""The JAX kernel: one replication of the interruption scheduler as a jump chain.

Model: ``bf-clusters`` Section 2 and Algorithm 1 of Section 4. Jobs wait in one virtual queue
in order; each server serves the oldest job it may serve, so a job's rate ``r_k`` is the sum of
the capacities of the servers for which it is the oldest compatible job. Sizes are mixtures of
sums of exponential phases (``jaxqueue.dist._phase``). Jumps: an arrival of class i (rate
``lam_i``, appended at the end; for random assignment its d servers drawn by Floyd's
algorithm); the end of a phase of job k (rate ``r_k nu_k``; the job leaves after its last
phase); an interruption of job k (rate ``r_k / theta``: the job moves to the END of the queue
with its remaining phases; ``theta = inf`` is FCFS).

The embedded jump chain is simulated (Gillespie) and time-averages use the conditional mean
holding time ``1 / R`` of each state instead of a sampled one (unbiased, less variance); the
per-class mean numbers of jobs give the delays of eq. (9) by Little's law.

Two layouts of the same chain (the same jumps from the same uniforms, tested equal): class
queues (class pools, :func:`_fifo_blocks`: a FIFO ring per class, O(N S) per jump) and
per-server queues (random assignment, :func:`_server_step`: each server lists the jobs it may
serve in queue order, O(sqrt(S) + D C) per jump for rows of C entries).

Static buffers: at most ``queue_size`` jobs (``KernelSpec.row_size`` per server row); an
arrival into a full buffer is dropped and counted in ``overflow``, and the caller refuses such
results and grows the buffer. Random numbers: ``n_uniforms`` per jump from the unrolled
13-round Threefry-2x32 on the counters ``(jump, column pair)`` under ``fold_in(key, block)``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .._random import bits_to_unit, keypair, threefry2x32

__all__ = ["KernelParams", "KernelSpec", "ChainStats", "chain_start", "run_blocks", "run_chain"]


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
        """Class pools small enough for the class-queue layout (O(N S) per jump; a ring slot
        in 24 bits of the jump's code, :func:`_fifo_decide`)."""
        return (
            self.random_d == 0
            and self.n_classes <= 16
            and self.n_classes * self.n_servers <= 1024
            and self.n_classes * self.queue_size < 2**24 - 1
        )

    @property
    def n_uniforms(self) -> int:
        """Uniforms per jump: event, phase (then the mixture component unless
        ``single_phase``, then the d servers of random assignment), rounded up to even."""
        n = 2 + (not self.single_phase) + self.random_d
        return n + n % 2

    @property
    def row_size(self) -> int:
        """C, the jobs a server's row of the per-server layout holds: Q for class pools (all
        jobs may list a server), else twice the mean ``D Q / S`` of a full buffer, a
        multiple of 8 (an arrival onto a full row is dropped and counted as an overflow,
        so the buffer, and C with it, grows)."""
        if self.random_d == 0:
            return self.queue_size
        c = -(-2 * self.width * self.queue_size // self.n_servers)
        return min(self.queue_size, max(8, -(-c // 8) * 8))


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


def _pick(rates: Float[Array, " L"], u):
    """The first index i whose cumulated rate exceeds ``u R``, the total rate R and the
    cumulated rate before i.

    Up to 32 rates: one cumulated sum (XLA:CPU lowers a cumulated sum of length L to O(L^2)
    additions). More: two levels, blocks of B = ceil(sqrt(L)) rates (zero-padded): the block
    of the target from the cumulated block sums, then the index inside that block, O(L) in all.
    (A rounding difference between a block's sum and its own cumulated sum can at worst pick a
    zero-rate index of the right block, about 1e-16 of the time in float64: the jump then
    changes nothing, as the old flat cumulated sum did on its own rounding ties.)
    """
    L = rates.shape[0]
    if L <= 32:
        cum = jnp.cumsum(rates)
        total = cum[-1]
        i = jnp.minimum(jnp.sum(cum <= u * total).astype(jnp.int32), L - 1)
        return i, total, jnp.where(i > 0, cum[jnp.maximum(i - 1, 0)], 0.0)
    B = -(-L // int(L**0.5))
    nb = -(-L // B)
    blocks = jnp.pad(rates, (0, nb * B - L)).reshape(nb, B)
    sums = jnp.sum(blocks, axis=1)
    cum_b = jnp.cumsum(sums)
    total = cum_b[-1]
    target = u * total
    b = jnp.minimum(jnp.sum(cum_b <= target).astype(jnp.int32), nb - 1)
    before = jnp.where(b > 0, cum_b[jnp.maximum(b - 1, 0)], 0.0)
    cum = jnp.cumsum(blocks[b])
    j = jnp.minimum(jnp.sum(cum <= target - before).astype(jnp.int32), B - 1)
    before = before + jnp.where(j > 0, cum[jnp.maximum(j - 1, 0)], 0.0)
    return jnp.minimum(b * B + j, L - 1), total, before


def _draw_event(params: KernelParams, srv_rate, busy, count, u0):
    """The next event of the jump chain (Gillespie) and the state's measured terms.

    Events ``0 .. N - 1`` are arrivals of class i (rate ``lam_i``), ``N + s`` the event of server
    s (rate ``srv_rate[s]``, 0 if idle): the first whose cumulated rate exceeds ``u0 R``
    (:func:`_pick`). The terms are weighted by the mean holding time ``1 / R``: ``(1 / R,
    count / R, busy capacity / R, n^2 / R)`` with ``count`` the jobs of each class and ``n``
    their total.
    """
    S = srv_rate.shape[0]
    dtype = params.mu_ext.dtype
    idx, total, _ = _pick(jnp.concatenate([params.lam, srv_rate]), u0)
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


def _blocks(spec: KernelSpec) -> tuple[int, int]:
    """``(nb, B)``: the per-server layout keeps the servers' rates as ``nb`` blocks of B (the
    last one zero-padded) when S > 32, one block of S otherwise."""
    S = spec.n_servers
    if S <= 32:
        return 1, S
    B = -(-S // int(S**0.5))
    return -(-S // B), B


def _packed(spec: KernelSpec) -> bool:
    """Random assignment stores a job's D servers as one number ``sum_a s_a S^a`` (int32)."""
    return spec.random_d > 0 and spec.n_servers**spec.width < 2**31


def _row_fields(spec: KernelSpec) -> tuple[int, int, jnp.dtype]:
    """``(T, F, dtype)`` of a row entry: T type fields (one: the class, or the packed servers;
    else the D servers), F in all (the remaining phases and the phase-rate index follow
    unless ``single_phase``); int16 when a single-phase type fits (half the memory: the rows
    are the state a jump reads at random, their cache misses its main cost)."""
    T = 1 if (spec.random_d == 0 or _packed(spec)) else spec.width
    F = T + (0 if spec.single_phase else 2)
    small = spec.single_phase and T == 1
    small = small and (spec.n_classes if spec.random_d == 0 else spec.n_servers**spec.width) < 2**15
    return T, F, jnp.dtype(jnp.int16 if small else jnp.int32)


def _server_step(spec: KernelSpec, params: KernelParams, state, u):
    """One jump of Algorithm 1 on per-server queues.

    Layout: ``rows[s, :cnt[s]]`` lists the jobs that may use server s, oldest first (the
    queue order restricted to them), one entry of F fields per job (:func:`_row_fields`): its
    type (its D servers for random assignment, or its class, which names its servers), then
    its remaining phases and phase-rate index unless ``single_phase``. ``rate[b, i]`` is the
    event rate of server ``s = b B + i`` (:func:`_blocks`), ``mu_s (nu + alpha)`` for the phase
    rate nu of its head ``rows[s, 0]`` (0 if idle), ``block_rate[b]`` and ``block_busy[b]``
    the sums of the rates and of the busy capacities of block b, recomputed for the touched
    blocks only. Server s serves the head of its row (Algorithm 1: the oldest job it may
    serve), so its event is a phase end or an interruption of that job. A job enters at the
    end of its D rows (on arrival and on re-entry after an interruption) and leaves them all
    when it departs or is interrupted; in each of its rows it is the FIRST entry of its type:
    a job of the same type before it there would list the server where it is the head, and be
    older. So no job table, no slot numbers: a jump draws a block then a server in it,
    O(sqrt(S)), and reads and writes the D rows of one job (the departing, interrupted,
    re-entered or arriving one), O(D C F), whatever the number of jobs held (the job slots it
    replaces cost O(Q D)). With one block (S <= 32) the event is drawn as by
    :func:`_fifo_decide`, so the two layouts make the same jumps on class pools.
    """
    rows, cnt, rate, block_rate, block_busy, n, count = state
    Q, S, N, D, C = spec.queue_size, spec.n_servers, spec.n_classes, spec.width, spec.row_size
    nb, B = _blocks(spec)
    T, _, rdt = _row_fields(spec)
    dtype = params.mu_ext.dtype
    single = spec.single_phase
    mu = params.mu_ext[:S]

    # --- the event: an arrival, or the event of server s_sel (a block, then a server in it)
    if nb == 1:
        idx, stats = _draw_event(params, rate[0], rate[0] > 0.0, count, u[0])
        is_arr = idx < N
        s_sel = jnp.clip(idx - N, 0, S - 1)
        b_sel, i_sel = jnp.zeros((), jnp.int32), s_sel
    else:
        top, total, before = _pick(jnp.concatenate([params.lam, block_rate]), u[0])
        is_arr = top < N
        b_sel = jnp.clip(top - N, 0, nb - 1)
        i_sel, _, _ = _pick(rate[b_sel], (u[0] * total - before) / block_rate[b_sel])
        s_sel = jnp.minimum(b_sel * B + i_sel, S - 1)
        hold = 1.0 / total
        n_tot = jnp.sum(count).astype(dtype)
        stats = (hold, count.astype(dtype) * hold, jnp.sum(block_busy) * hold, n_tot**2 * hold)
    head = rows[s_sel, 0].astype(jnp.int32)
    job_ok = (~is_arr) & (rate[b_sel, i_sel] > 0.0)
    nu_k = params.rate_table[0] if single else params.rate_table[head[T + 1]]
    phase = u[1] * (nu_k + params.alpha) < nu_k
    done = job_ok & phase
    depart = done & (True if single else head[T] == 1)
    interrupt = job_ok & ~phase
    leave = depart | interrupt

    # --- arrival of class c
    c = jnp.clip(jnp.where(is_arr, idx if nb == 1 else top, 0), 0, N - 1)
    col = 2 if single else 3
    if spec.random_d:
        drawn = _draw_servers(u[col : col + spec.random_d], S, spec.random_d)
        if T == 1:
            new_type = sum(drawn[a] * S**a for a in range(D))[None]
        else:
            new_type = drawn
    else:
        new_type = c[None]
    if single:
        new = new_type.astype(jnp.int32)
    else:
        comp = jnp.minimum(
            jnp.sum(params.comp_cdf < u[2]).astype(jnp.int32), params.comp_cdf.size - 1
        )
        info = jnp.stack([params.comp_counts[comp], params.comp_rate_idx[comp]])
        new = jnp.concatenate([new_type, info]).astype(jnp.int32)

    # --- the D rows of the touched job (the arriving one, or the head)
    entry = jnp.where(is_arr, new, head)
    if spec.random_d:
        cls = jnp.zeros((), jnp.int32)
        if T == 1:
            srv_t = jnp.stack([(entry[0] // S**a) % S for a in range(D)])
        else:
            srv_t = entry[:D]
    else:
        cls = jnp.minimum(entry[0], N - 1)
        srv_t = params.class_servers[cls]
    # the per-jump scalars computed once: without the barrier XLA fuses them into every
    # element of the row operations below
    entry, srv_t, cls, is_arr, job_ok, done, depart, interrupt = jax.lax.optimization_barrier(
        (entry, srv_t, cls, is_arr, job_ok, done, depart, interrupt)
    )
    leave = depart | interrupt
    valid = srv_t < S
    at_t = jnp.minimum(srv_t, S - 1)
    rows_t, cnt_t = rows[at_t].astype(jnp.int32), cnt[at_t]  # (D, C, F), (D,)
    room = jnp.all((cnt_t < C) | ~valid)
    arr_ok = is_arr & (n < Q) & room
    overflow = is_arr & ~arr_ok
    pos = jnp.arange(C, dtype=jnp.int32)[None, :]
    same = jnp.all(rows_t[:, :, :T] == entry[None, None, :T], axis=-1)
    first = C - jnp.max(jnp.where(same, C - pos, 0), axis=1)  # C if none (an int max)
    p = jnp.where(job_ok, first, C)[:, None]
    p, arr_ok, cnt_t = jax.lax.optimization_barrier((p, arr_ok, cnt_t))
    after = jnp.concatenate([rows_t[:, 1:], jnp.full_like(rows_t[:, :1], -1)], axis=1)
    shifted = jnp.where(((pos >= p) & leave)[..., None], after, rows_t)
    if not single:  # a phase ends, not the last: one phase fewer in each of its rows
        fewer = (pos == p) & (done & ~depart)
        shifted = shifted.at[..., T].add(-fewer.astype(jnp.int32))
    end = cnt_t[:, None] - leave.astype(jnp.int32)
    ins = arr_ok | interrupt  # at the end of its rows
    new_rows = jnp.where(((pos == end) & ins)[..., None], entry, shifted)
    new_cnt = end[:, 0] + ins.astype(jnp.int32)
    if single:
        nu_h = params.rate_table[0]
    else:
        nu_h = params.rate_table[jnp.maximum(new_rows[:, 0, T + 1], 0)]
    rate_t = jnp.where(new_cnt > 0, params.mu_ext[srv_t] * (nu_h + params.alpha), 0.0)
    at_w = jnp.where(valid, srv_t, S)  # padding servers: dropped
    new_cnt, rate_t, at_w = jax.lax.optimization_barrier((new_cnt, rate_t, at_w))
    rows = rows.at[at_w].set(new_rows.astype(rdt), mode="drop")
    sidx = jnp.arange(S, dtype=jnp.int32)
    flat = jnp.arange(nb * B, dtype=jnp.int32).reshape(nb, B)
    for a in range(D):  # selects, not scatters: a scatter into a carried vector is copied
        cnt = jnp.where(sidx == at_w[a], new_cnt[a], cnt)
        rate = jnp.where(flat == at_w[a], rate_t[a].astype(dtype), rate)
    if nb > 1:  # the sums of the touched blocks, recomputed (no drift)
        mu_b = jnp.pad(mu, (0, nb * B - S)).reshape(nb, B)
        bidx = jnp.arange(nb, dtype=jnp.int32)
        for a in range(D):
            b = at_t[a] // B
            r_b = jnp.sum(rate[b])
            m_b = jnp.sum(jnp.where(rate[b] > 0.0, mu_b[b], 0.0))
            block_rate = jnp.where(bidx == b, r_b, block_rate)
            block_busy = jnp.where(bidx == b, m_b, block_busy)

    cidx = jnp.arange(N)
    count = count + ((cidx == cls) & arr_ok) - ((cidx == cls) & depart)
    n = n + arr_ok.astype(n.dtype) - depart.astype(n.dtype)
    events = jnp.stack([arr_ok, depart, interrupt, overflow]).astype(dtype)
    return (rows, cnt, rate, block_rate, block_busy, n, count), (stats, events, n)


def _server_state(spec: KernelSpec, dtype):
    """Empty per-server queues: the rows (entries of -1) and their lengths, the servers'
    rates in blocks with the blocks' sums of rates and of busy capacities, the number of jobs
    and the count per class."""
    _, F, rdt = _row_fields(spec)
    nb, B = _blocks(spec)
    S, C = spec.n_servers, spec.row_size
    return (
        jnp.full((S, C, F), -1, rdt),
        jnp.zeros((S,), jnp.int32),
        jnp.zeros((nb, B), dtype),
        jnp.zeros((nb,), dtype),
        jnp.zeros((nb,), dtype),
        jnp.zeros((), jnp.int32),
        jnp.zeros((spec.n_classes,), jnp.int32),
    )


def _fifo_state(spec: KernelSpec):
    """Empty class queues: ``ring[f]`` of shape (N Q + 1,) (class c's ring at ``c Q .. c Q +
    Q - 1``, then a sentinel slot, never written, read as the head of an empty class) for the
    fields stamp (``_EMPTY`` in the sentinel; then remaining phases and phase-rate index unless
    ``single_phase``), and ``meta`` (int32, 2 N + 7): ``head`` and ``size`` per class, the
    number of jobs n, ``n_max - n``, the jump counter, and the block's event counts (arrivals,
    departures, interruptions, overflows)."""
    Q, N = spec.queue_size, spec.n_classes
    fields = 1 if spec.single_phase else 3
    ring = (jnp.full((N * Q + 1,), _EMPTY, jnp.int32),) + (jnp.zeros((N * Q + 1,), jnp.int32),) * (
        fields - 1
    )
    return ring, jnp.zeros((2 * N + 7,), jnp.int32)


_UNROLL = 32
"""Vectors up to this length are indexed by chains of selects and summed by unrolled adds in
the class-queue jump (elementwise code that XLA:CPU fuses with its consumers; a gather or a
reduction there is a loop of its own, a cumulated sum a reduce-window)."""


def _at(vec, i):
    """``vec[i]`` for a traced index in range: a chain of selects up to ``_UNROLL`` entries."""
    if vec.shape[0] > _UNROLL:
        return vec[i]
    out = vec[0]
    for k in range(1, vec.shape[0]):
        out = jnp.where(i == k, vec[k], out)
    return out


def _sum(vec):
    """``jnp.sum(vec)`` as the same sequential additions, unrolled up to ``_UNROLL`` entries."""
    if vec.shape[0] > _UNROLL:
        return jnp.sum(vec)
    out = vec[0]
    for k in range(1, vec.shape[0]):
        out = out + vec[k]
    return out


def _oldest_class(compat, hs, nu_c):
    """For each server, the class whose head is the oldest job it may serve, that job's stamp
    (``_EMPTY`` if none) and its phase rate: ``compat`` (N, S), ``hs`` and ``nu_c`` (N,) the
    heads' stamps and phase rates."""
    N = compat.shape[0]
    best = jnp.where(compat[0], hs[0], _EMPTY)
    own = jnp.zeros(best.shape, jnp.int32)
    nu = jnp.broadcast_to(nu_c[0], best.shape)
    for c in range(1, N):  # N <= 16: unrolled (argmin is slower on the CPU)
        key = jnp.where(compat[c], hs[c], _EMPTY)
        better = key < best
        best, own = jnp.where(better, key, best), jnp.where(better, c, own)
        nu = jnp.where(better, nu_c[c], nu)
    return own, best, nu


def _fifo_heads(spec: KernelSpec, ring, meta):
    """The stamp of each class's head (``_EMPTY`` if the class is empty) and, unless
    ``single_phase``, its phase-rate index: one gather from the rings."""
    Q, N = spec.queue_size, spec.n_classes
    at = jnp.where(meta[N : 2 * N] > 0, jnp.arange(N, dtype=jnp.int32) * Q + meta[:N], N * Q)
    return ring[0][at] if spec.single_phase else (ring[0][at], ring[2][at])


def _fifo_servers(spec: KernelSpec, params: KernelParams, compat, heads):
    """Each server's class (the compatible class whose head is oldest), whether it is busy,
    and its event rate ``mu_s (nu + alpha)`` (0 if idle) for the head's phase rate nu."""
    N, S = spec.n_classes, spec.n_servers
    if spec.single_phase:
        hs, nu_c = heads, jnp.broadcast_to(params.rate_table[0], (N,))
    else:
        hs, ridx = heads
        nu_c = jnp.stack([_at(params.rate_table, ridx[c]) for c in range(N)])
    own, best, nu_own = _oldest_class(compat, hs, nu_c)
    busy = best < _EMPTY
    return own, busy, nu_own, jnp.where(busy, params.mu_ext[:S] * (nu_own + params.alpha), 0.0)


# the kinds of a jump, as coded by _fifo_decide (c a class): an accepted arrival of class c (c),
# a departure (N + c) or an interruption (2 N + c) of class c's head, the end of a phase that
# is not its last (3 N + c), an arrival dropped (4 N), no change (4 N + 1: an idle server drawn
# on a rounding tie)


def _fifo_delta(spec: KernelSpec):
    """The change of ``meta`` (:func:`_fifo_state`) by each kind of jump: per column, two
    ranges of kinds ``[lo, hi)`` and the change ``d`` each brings, as six int32 vectors
    ``(lo1, hi1, d1, lo2, hi2, d2)`` of length 2 N + 7."""
    N = spec.n_classes
    r = np.zeros((6, 2 * N + 7), np.int32)
    n, hmax, jc, ev = 2 * N, 2 * N + 1, 2 * N + 2, 2 * N + 3
    for c in range(N):
        r[:, c] = [N + c, N + c + 1, 1, 2 * N + c, 2 * N + c + 1, 1]  # head: leaves
        r[:, N + c] = [c, c + 1, 1, N + c, N + c + 1, -1]  # size: arrives, departs
    r[:, n] = [0, N, 1, N, 2 * N, -1]
    r[:, hmax] = [0, N, -1, N, 2 * N, 1]  # n_max - n, then clipped at 0
    r[:, jc] = [0, 4 * N + 2, 1, 0, 0, 0]  # the jump counter: every jump
    for e, (lo, hi) in enumerate([(0, N), (N, 2 * N), (2 * N, 3 * N), (4 * N, 4 * N + 1)]):
        r[:, ev + e] = [lo, hi, 1, 0, 0, 0]
    return tuple(jnp.asarray(v) for v in r)


def _fifo_decide(spec: KernelSpec, params: KernelParams, compat, ring, meta, heads, u):
    """The next jump from the state ``(ring, meta)`` (heads from :func:`_fifo_heads`) and its
    uniforms ``u``: one int32 code, the kind of the jump (bits 24-30) and the ring slot it
    writes (bits 0-23; ``N Q + 1``, out of range, for none), and unless ``single_phase`` the
    mixture component of an arrival.

    The event is drawn as :func:`_draw_event` draws it (an arrival of class i or the event of
    server s, cumulated rates) and its kind as :func:`_fifo_apply` documents."""
    Q, S, N = spec.queue_size, spec.n_servers, spec.n_classes
    single = spec.single_phase
    own, busy, nu_own, srv_rate = _fifo_servers(spec, params, compat, heads)
    rates = jnp.concatenate([params.lam, srv_rate])
    L = N + S
    if L > _UNROLL:
        idx, _, _ = _pick(rates, u[0])
    else:  # _pick's cumulated sum (sequential additions), unrolled
        cum = [rates[0]]
        for k in range(1, L):
            cum.append(cum[-1] + rates[k])
        target = u[0] * cum[-1]
        idx = jnp.minimum(_sum(jnp.stack([(c <= target).astype(jnp.int32) for c in cum])), L - 1)
    s_sel = jnp.clip(idx - N, 0, S - 1)
    ck = _at(own, s_sel)  # the class whose head has the event
    job_ok = (idx >= N) & _at(busy, s_sel)
    nu_k = _at(nu_own, s_sel)
    phase = u[1] * (nu_k + params.alpha) < nu_k
    head, size, n = meta[:N], meta[N : 2 * N], meta[2 * N]
    is_arr = idx < N
    c = jnp.where(is_arr, jnp.clip(idx, 0, N - 1), ck)
    if single:
        last = True
    else:
        last = ring[1][ck * Q + _at(head, ck)] == 1
    kind = jnp.where(
        is_arr,
        jnp.where(n < Q, c, 4 * N),
        jnp.where(
            job_ok,
            jnp.where(phase, jnp.where(last, N + c, 3 * N + c), 2 * N + c),
            4 * N + 1,
        ),
    )
    push = (is_arr & (n < Q)) | (job_ok & ~phase)
    at = jnp.where(push, c * Q + (_at(head, c) + _at(size, c)) % Q, N * Q + 1)
    if not single:
        at = jnp.where(job_ok & phase & ~last, c * Q + _at(head, c), at)
    code = at | (kind << 24)
    if single:
        return code, None
    i32 = jnp.int32
    return code, jnp.minimum(_sum((params.comp_cdf < u[2]).astype(i32)), params.comp_cdf.size - 1)


def _fifo_measure(spec: KernelSpec, params: KernelParams, compat, heads):
    """``(1 / R, busy / R)`` of the state (R its total rate, ``busy`` its busy capacity): the
    terms of :func:`_draw_event`, R summed as :func:`_pick` sums it."""
    N, S = spec.n_classes, spec.n_servers
    _, busy, _, srv_rate = _fifo_servers(spec, params, compat, heads)
    rates = jnp.concatenate([params.lam, srv_rate])
    if N + S > _UNROLL:
        _, total, _ = _pick(rates, jnp.zeros((), rates.dtype))
    else:
        total = rates[0]
        for k in range(1, N + S):
            total = total + rates[k]
    hold = 1.0 / total
    return jnp.stack([hold, jnp.sum(jnp.where(busy, params.mu_ext[:S], 0.0)) * hold])


def _fifo_terms(spec: KernelSpec, meas, meta, f):
    """The measured terms of :func:`_draw_event` from ``meas`` (:func:`_fifo_measure`) and the
    class sizes; ``f`` weighs the first-half terms."""
    N = spec.n_classes
    size = meta[N : 2 * N]
    hold = meas[0]
    n_tot = jnp.sum(size).astype(hold.dtype)
    area = size.astype(hold.dtype) * hold
    return jnp.concatenate(
        [jnp.stack([hold, meas[1], n_tot * n_tot * hold, f * hold]), area, f * area]
    )


def _fifo_apply(spec: KernelSpec, params: KernelParams, ring, meta, code, comp):
    """The jump of ``code`` (:func:`_fifo_decide`) on class queues (module docstring).

    Server s serves the head of class ``own[s]``, the compatible class whose head is oldest;
    the event of server s ends a phase of that job (the job leaves after its last) or
    interrupts it (it goes to the tail of its class, new stamp). One write per field of the
    rings: an arrival or an interrupted job at the tail of its class, or (a phase end, not the
    last) at the head of its class; ``meta`` changes by the row of its kind
    (:func:`_fifo_delta`), heads modulo Q."""
    Q, N = spec.queue_size, spec.n_classes
    at, kind = code & 0xFFFFFF, code >> 24
    lo1, hi1, d1, lo2, hi2, d2 = _fifo_delta(spec)
    new = meta + d1 * ((kind >= lo1) & (kind < hi1)) + d2 * ((kind >= lo2) & (kind < hi2))
    col = jnp.arange(meta.shape[0])
    new = jnp.where((col < N) & (new >= Q), new - Q, new)  # heads modulo Q
    new = jnp.where(col == 2 * N + 1, jnp.maximum(new, 0), new)
    stamp = new[2 * N + 2]  # a job's stamp: the jump counter after the jump that queues it
    if spec.single_phase:
        ring = (ring[0].at[at].set(stamp, mode="drop"),)
    else:
        c = jnp.clip(kind % N, 0, N - 1)
        src = c * Q + _at(meta[:N], c)  # the head of the class: the job interrupted
        arr, intr = kind < N, (kind >= 2 * N) & (kind < 3 * N)
        vals = (
            jnp.where(arr | intr, stamp, ring[0][jnp.minimum(at, N * Q)]),
            jnp.where(arr, params.comp_counts[comp], ring[1][src] - (~intr).astype(jnp.int32)),
            jnp.where(arr, params.comp_rate_idx[comp], ring[2][src]),
        )
        ring = tuple(r.at[at].set(v, mode="drop") for r, v in zip(ring, vals, strict=True))
    return ring, new


def _block_key(key, block):
    """The two Threefry key words of block ``block`` of a replication: ``fold_in(key, block)``."""
    return keypair(key, block)


def _uniforms(kd, jump, n: int, dtype):
    """The ``n`` uniforms in [0, 1) of jump ``jump`` of a block (``n`` even): the words of
    Threefry-2x32 (``jaxqueue._random.threefry2x32``) on the counter
    pairs ``(jump, column pair)`` under the block's key words ``kd``; 32 random bits each (24 in
    float32, so that none rounds to 1). Computed inside the jump (no block of uniforms is
    stored: at 256 replications and 1000 jumps such a block was 4-8 MB, beyond the 2 MB
    cache, and evicted the state the jump reads at random)."""
    pair = jnp.arange(n // 2, dtype=jnp.uint32)
    y0, y1 = threefry2x32(kd[0], kd[1], jnp.broadcast_to(jump.astype(jnp.uint32), pair.shape), pair)
    return bits_to_unit(jnp.stack([y0, y1], axis=-1).reshape(n), dtype)


def _uniform_words(kd, jump, n: int, dtype):
    """:func:`_uniforms` as a tuple of ``n`` scalars (the same numbers): the words of each
    counter pair kept apart, so that a loop that reads them computes the cipher once per
    element (a stacked vector is computed again for each of its entries)."""
    out = []
    for p in range(n // 2):
        for y in threefry2x32(kd[0], kd[1], jump.astype(jnp.uint32), jnp.uint32(p)):
            out.append(bits_to_unit(y, dtype))
    return tuple(out)


def _like_key(key, tree):
    """``tree`` plus a zero computed from ``key``: under ``vmap`` the loops' initial state is
    then batched as their results are (one batching pass of each loop body, not two)."""
    zero = (_block_key(key, 0)[0] & 0).astype(jnp.int32)
    return jax.tree.map(lambda x: x + zero.astype(x.dtype), tree)


def _fifo_blocks(spec: KernelSpec, params: KernelParams, key, n_warm, n_chunks):
    """:func:`run_chain` on class queues, as :func:`_chain_blocks` (totals, event counts,
    n_max, n).

    The carry of a jump is the rings, one int32 vector ``meta`` (heads, sizes, next stamp,
    number of jobs, its maximum, the block's event counts), the block's float totals, and
    the next jump decided: its code (:func:`_fifo_decide`) and the state's measured terms
    (:func:`_fifo_measure`). A jump adds those terms, applies the code (:func:`_fifo_apply`)
    and decides the next one: each array the decision makes is computed once, in the carry,
    whatever reads it (XLA:CPU computes each array a jump writes in a fused loop of its own,
    recomputing in it every value it reads that is not an array already). A block decides its
    first jump before its loop, and applies its last after it."""
    dtype = params.mu_ext.dtype
    N, S, chunk = spec.n_classes, spec.n_servers, spec.chunk
    compat = jnp.any(params.class_servers[:, :, None] == jnp.arange(S)[None, None, :], axis=1)
    ring0, meta0 = _fifo_state(spec)
    half = (n_chunks * chunk) // 2
    zero = jnp.zeros((4 + 2 * N,), dtype)

    def block(c, carry):
        ring, meta, total, events = carry
        kd = _block_key(key, c)
        # the first half is the first floor(J / 2) of the J = n_chunks * chunk measured
        # jumps, however the run is chunked (a run of one chunk included)
        lim = jnp.clip(half - (c - n_warm) * chunk, 0, chunk)
        # the jump counter of meta runs from c chunk (a job's stamp is its value after the
        # jump that queues the job: increasing, below _EMPTY as the run checks
        # (n_warm + n_chunks) chunk < 2**31 - 1)
        base = c * chunk

        def decide(ring, meta, acc):
            j = meta[2 * N + 2] - base  # the jump's index in the block
            u = _uniform_words(kd, j, spec.n_uniforms, dtype)
            heads = _fifo_heads(spec, ring, meta)
            code, comp = _fifo_decide(spec, params, compat, ring, meta, heads, u)
            meas = _fifo_measure(spec, params, compat, heads)
            return acc + _fifo_terms(spec, meas, meta, (j < lim).astype(dtype)), code, comp

        def jump(_, carry):  # applies a jump, decides the next
            ring, meta, acc, code, comp = carry
            ring, meta = _fifo_apply(spec, params, ring, meta, code, comp)
            return (ring, meta, *decide(ring, meta, acc))

        meta = meta.at[2 * N + 3 :].set(0).at[2 * N + 2].set(base)
        carry = (ring, meta, *decide(ring, meta, zero))
        ring, meta, acc, code, comp = jax.lax.fori_loop(0, chunk - 1, jump, carry)
        ring, meta = _fifo_apply(spec, params, ring, meta, code, comp)
        on = c >= n_warm
        counts = meta[-4:] * jnp.array([on, on, on, True], jnp.int32)  # overflow: warm-up too
        return ring, meta, total + on.astype(dtype) * acc, events + counts

    def result(carry):
        _, meta, tot, ev = carry
        return tot, ev, meta[2 * N + 1] + meta[2 * N], meta[2 * N]

    init = _like_key(key, (ring0, meta0, zero, jnp.zeros((4,), jnp.int32)))
    return init, block, result


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
    init, block, result = _chain_blocks(spec, params, key, n_warm, n_chunks)
    return _chain_stats(spec, result(jax.lax.fori_loop(0, n_warm + n_chunks, block, init)))


def chain_start(spec: KernelSpec, params: KernelParams, key, n_warm, n_chunks):
    """The state of one replication of :func:`run_chain` before its first block."""
    return _chain_blocks(spec, params, key, n_warm, n_chunks)[0]


def run_blocks(spec: KernelSpec, params: KernelParams, key, n_warm, n_chunks, state, lo, hi):
    """Blocks ``lo`` to ``hi - 1`` of :func:`run_chain` from ``state`` (:func:`chain_start`
    for ``lo = 0``): ``(state after them, ChainStats so far)``. The blocks in a few calls give
    the numbers of one call (the same operations in the same order)."""
    _, block, result = _chain_blocks(spec, params, key, n_warm, n_chunks)
    state = jax.lax.fori_loop(lo, hi, block, state)
    return state, _chain_stats(spec, result(state))


def _chain_blocks(spec: KernelSpec, params: KernelParams, key, n_warm, n_chunks):
    """The loop of :func:`run_chain` in pieces: ``(initial state, block(c, state) -> state,
    result(state) -> (totals, event counts, n_max, n))``."""
    blocks = _fifo_blocks if spec.class_queues else _server_blocks
    return blocks(spec, params, key, n_warm, n_chunks)


def _chain_stats(spec: KernelSpec, result) -> ChainStats:
    N = spec.n_classes
    tot, ev, n_max, n = result
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


def _server_blocks(spec: KernelSpec, params: KernelParams, key, n_warm, n_chunks):
    """:func:`run_chain` on per-server queues, as :func:`_chain_blocks`."""
    dtype = params.mu_ext.dtype
    N = spec.n_classes
    state0 = _server_state(spec, dtype)
    width = 4 + 2 * N + 4  # time, busy, area_sq, time_first | area, area_first | events

    def jump(carry, xs):
        state, acc, n_max, _, kd = carry
        j, first = xs
        u = _uniforms(kd, j, spec.n_uniforms, dtype)
        state, ((hold, area, busy, area_sq), events, n) = _server_step(spec, params, state, u)
        add = jnp.concatenate(
            [jnp.stack([hold, busy, area_sq, first * hold]), area, first * area, events]
        )
        return (state, acc + add, jnp.maximum(n_max, n), n, kd), None

    # the first half is the first floor(J / 2) of the J = n_chunks * chunk measured jumps,
    # however the run is chunked (a run of one chunk included)
    half = (n_chunks * spec.chunk) // 2
    steps = jnp.arange(spec.chunk, dtype=jnp.int32)
    zero = jnp.zeros((width,), dtype)

    def block(c, carry):
        state, total, events, n_max, n = carry
        kd = _block_key(key, c)
        first = (steps < jnp.clip(half - (c - n_warm) * spec.chunk, 0, spec.chunk)).astype(dtype)
        carry = (state, zero, n_max, n, kd)
        (state, acc, n_max, n, _), _ = jax.lax.scan(jump, carry, (steps, first))
        on = c >= n_warm
        counts = acc[-4:].astype(jnp.int32)  # exact: at most chunk per block
        counts = counts * jnp.array([on, on, on, True], jnp.int32)  # overflow: warm-up included
        return state, total + on.astype(dtype) * acc[:-4], events + counts, n_max, n

    i32 = jnp.zeros((), jnp.int32)
    init = _like_key(key, (state0, zero[:-4], jnp.zeros((4,), jnp.int32), i32, i32))
    return init, block, lambda carry: carry[1:]
