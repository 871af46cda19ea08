"""Backward sub-perfect sampling of the stationary workload (``mjsre`` Algorithm 1).

For sample ``i`` the Loynes state ``M_ell`` is the ordered workload found by job 0 when the
system starts empty at the arrival of job ``-ell`` and is fed jobs ``-ell, ..., -1``
(eq. (4)). ``M_ell`` is non-decreasing in ``ell`` (Lemma 4.3); Algorithm 1 doubles ``ell``
until ``M_{2 ell} == M_ell`` (exact equality, reliable in float32) and returns that state, a
sub-perfect sample (a lower bound of a perfect sample that couples in finite time).

Stopping rule (two layers, and a floor):

1. **Per sample** (Algorithm 1, Section 4.4): from a first horizon ``F``, double until
   ``M_{2 ell} == M_ell``. Call the result ``X(F)``; it is ``M_ell`` for some ``ell >= F``.
2. **Per batch** (bias control, issue 14): the per-sample rule is fooled when the horizon
   rarely holds a job of a rare heavy class or the load is near ``lambda_c``: ``M_{2 ell}``
   equals ``M_ell`` by chance and the sample stays far below a perfect one. Sub-perfect
   samples are lower bounds, so this is a one-sided bias that no interval contains. The
   batch horizon ``F`` doubles while a bound ``B`` of the bias of the mean wait ``wbar =
   sum_c p_c W^{alpha_c}`` exceeds ``bias_tol`` (1/4) of the half-width of its interval.
   ``B = (mean + z se) * max(1, r / (1 - r))`` of paired differences ``>= 0`` of ``wbar``
   (same inputs: counter-based keys), ``r`` being the ratio of the last two mean differences
   (clipped to 0.9; 1 at a first test): if the differences decay geometrically with ratio
   ``r``, the bias left is ``mean r / (1 - r)``.

   * The first test is free: either ``X(F) = M_F = M_{2F}`` or the sample went on past
     ``2F``, so ``X(F) >= M_{2F}`` and the bias of ``X(F)`` is at most ``E[M_inf - M_{2F}]``,
     the sum of the later Loynes increments; the differences are the increments
     ``M_{2F} - M_F`` that Algorithm 1 computed for every sample.
   * If it fails, the later tests use ``X(2F) - X(F)``, what a doubling changes in the
     estimate itself (the Loynes increments also count the samples that had already gone
     past ``2F``: on two-class-256 at 0.9 ``lambda_c``, 1000 samples, they grow from 41 to 55
     per doubling from ``F = 8192`` to ``65536`` while ``X(2F) - X(F)`` falls from 43 to 33).

   ``B`` is reported (``bias_bound``, also per class) and
   :func:`~jaxqueue.mjqm.palm_metrics` adds it to the upper ends of the mean intervals. A
   bound rather than a significance test: with 10,000 samples a difference 30 times below
   the half-width is already significant.
3. **Horizon floor** (when ``ell0`` is not given): the first horizon is the larger of
   ``8 / p_min`` jobs (the horizons of the first test hold 8 and 16 jobs of the rarest class
   on average) and 4 relaxation times of an M/M/1 queue at the same load ``rho = lam /
   lambda_c`` (``rho / (1 - sqrt(rho))^2`` jobs each, which grows like ``4 / (1 - rho)^2``),
   capped at ``2^16`` jobs; ``lambda_c`` is exact for exponential services and Poisson
   arrivals (the QBD), else the pile-growth estimate.

``X(2F)`` differs from ``X(F)`` only for the samples whose per-sample rule stopped at the first
comparison (``M_{2F} == M_F``), so a batch doubling reruns only those, from their stored
``M_{2F}``: reaching a batch horizon ``F`` costs about ``2 F`` jobs per sample, whatever the
first horizon, and the first test costs nothing. ``status`` is ``unconverged`` when some sample
hit the per-sample cap ``max_ell`` or the work budget ``max_work``, ``biased`` when the bias
test still failed where the batch could not double any more (``4 F > max_ell`` or the work
budget), else ``ok``.

4. **Time budget** (``max_seconds``): the bias control runs on a pilot of ``_PILOT`` samples;
   then further samples are drawn directly at a horizon ``H <= F`` (Algorithm 1 started at
   ``H`` gives ``X(H)``) in rounds sized from the measured speed, until ``n_samples`` or the
   budget. ``H`` is the shortest tested horizon whose bias bound, the passing test's bound
   plus the paired tests' bounds of the differences ``X(2h) - X(h)`` down to ``H``, is still
   within ``bias_tol`` of the pilot's half-width (:func:`_shortest_horizon`): where the last
   doubling changed little, each further sample costs half as much. The bias bound of the
   pooled mean is the samples' bounds weighted by their counts, at most ``bias_tol
   sqrt(m / _PILOT)`` half-widths with ``m`` samples in all, and it is in the interval.
   Measured on two-class-256 at 0.7 ``lambda_c`` (2-core CPU): 2000 samples with the bias
   control took 61 s (batch horizon 65536), 10,000 more than 5 minutes.

Implementation:

* inputs of job ``-n`` depend only on ``(key, i, n)`` (:mod:`._bspec`), so doubling reuses the
  same past and the samples do not depend on batching or on the number of devices (they do
  depend on the number of samples through the batch test);
* a host loop over doublings keeps only the samples not yet converged (measured:
  a batch that waits for its slowest sample does up to 12x the necessary work); the active
  samples are run in batches of sizes ``min_batch * 8^k`` (greedy, only the last one padded),
  so the number of compilations stays small and the work done stays close to the work needed;
* Remark 2 (memory splitting): ``M_{n1,0}(0) = M_{n2,0}(M_{n1,n2}(0))``: a horizon is run as
  consecutive segments of at most ``split_chunks * CHUNK`` jobs, each generating its inputs
  chunk by chunk inside the jit, so memory does not grow with ``ell``;
* at each doubling ``ell -> 2 ell`` the new past (jobs ``-2 ell .. -ell - 1``) is run from
  the empty state, then jobs ``-ell .. -1`` are replayed from there (Remark 2) beside the
  previous trajectory (from the empty state at ``-ell``, one draw of the inputs for both, the
  two states stacked into one batch) until the two are equal at the end of a block of
  ``_BLOCK`` jobs: from there on they stay equal, so ``M_{2 ell} = M_ell``; the samples whose
  trajectories have met leave the batch after segments of 2, 4, 8, ... blocks. The test is
  made once per block: a per-job test (the replay used to stop when its state emptied, Lemma
  4.1) kept XLA:CPU from compiling the scan into a tight loop and cost twice the update;
* the first two horizons ``F`` and ``2 F`` of all samples run in one device call per device
  (:func:`_pair_local`): per group of ``_SUB`` samples the past ``M_{2F, F}(0)``, then jobs
  ``-F .. -1`` fed at once to the trajectory of ``M_F`` and to the one of ``M_{2F}`` for
  ``_MEET_BLOCKS`` blocks, then to the first alone; the samples whose trajectories have not
  met go on as above. ``work_needed`` counts each replay until the trajectories were seen to
  meet;
* the sample axis of each batch of 512 or more is sharded over ``jax.devices()`` (smaller
  batches run on one device: synchronising devices costs more than it saves there); the
  grouped calls give each device its own share and loop (``shard_map``);
* on a CPU the kernels are compiled with 512-bit vectors (:data:`_CPU_OPTIONS`);
* ``ell`` is capped at ``max_ell``; samples that did not converge are reported in
  ``BackwardSamples.converged`` and ``status`` (their state is the last lower bound).

The one-job update is the FCFS policy's step (``_policy.py``: eq. (2), an O(s) merge).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec

from .._jit import jit_per_platform
from .._sharding import BATCH, batch_devices, batch_mesh, shard_batch, to_host
from ..stats import Result, Status
from ._bspec import CHUNK, check_plain, chunk_inputs, workload_fields
from ._policy import FCFSRecurrence
from ._stability import check_load, lambda_c_closed_form
from ._workload import Workload

__all__ = [
    "BackwardSamples",
    "BiasTest",
    "sample_backward",
    "horizon_floor",
    "loynes_state",
]

_RARE_JOBS = 8
"""Jobs of the rarest class that the horizon floor holds on average."""

_RELAX_TIMES = 4
"""M/M/1 relaxation times that the horizon floor holds."""

_FLOOR_CAP = 1 << 16
"""Largest horizon floor (jobs); the batch test goes further when it must."""

_WORK_BUDGET = 1 << 39
"""Default ``max_work`` times ``s``: sample-jobs of Algorithm 1 and the batch test (the cost of
a sample-job grows with ``s``); about 10 minutes on a 2-core CPU."""


_PILOT = 1000
"""Samples of the pilot that runs the bias control when ``sample_backward`` has a time budget;
the others are drawn at the pilot's batch horizon while the budget lasts."""

_SHARD_MIN = 512
"""Smallest batch spread over several devices."""

_BLOCK = 64
"""Jobs whose inputs are drawn at once inside a chunk: a (block, samples) slab that stays in
cache (measured: 105 M sample-jobs/s with blocks of 64 against 77 M with whole chunks)."""


def _chunk(workload: Workload, W, key, i, c, lam):
    """Feed chunk ``c`` (256 jobs, oldest first) into a batch of states ``W`` (samples ``i``).

    The inputs are drawn in blocks of ``_BLOCK`` jobs in the ``(jobs, samples)`` layout the
    scan reads.
    """
    step1 = jax.vmap(FCFSRecurrence((W.shape[-1],)).step)

    def block(b, W):
        alpha, sigma, tau, _ = chunk_inputs(
            workload, key, i, c, lam, W.dtype, block=b, length=_BLOCK
        )
        # Materialise the block's inputs before the scan reads them (measured: ~10% faster).
        x = lax.optimization_barrier((alpha, sigma, tau))
        return lax.scan(lambda W, x: (step1(W, *x), None), W, x)[0]

    return lax.fori_loop(0, CHUNK // _BLOCK, block, W)


def _segment_batch_impl(workload, W, key, ids, c_hi, n_chunks, lam):
    """Feed chunks ``c_hi - 1`` down to ``c_hi - n_chunks`` into a batch of states."""
    return lax.fori_loop(
        0, n_chunks, lambda j, W: _chunk(workload, W, key, ids, c_hi - 1 - j, lam), W
    )


_CPU_OPTIONS = {"xla_cpu_prefer_vector_width": 512}
"""XLA:CPU options of the sampler's kernels: 512-bit vectors where the CPU has them (measured
on the 2-core AVX-512 machine: the counter-based inputs and the O(s) step of a batch of 512
samples 61 -> 71 M sample-jobs/s, the same numbers bit for bit). Not passed to other
backends."""


def _jit_per_backend(fn, **kw):
    """``fn`` jitted twice, with :data:`_CPU_OPTIONS` for the CPU and without for the other
    backends; the returned function picks by ``jax.default_backend()``."""
    for_platform = jit_per_platform(fn, _CPU_OPTIONS, **kw)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return for_platform(jax.default_backend())(*args, **kwargs)

    return call


_segment_batch = _jit_per_backend(_segment_batch_impl)


def _run(workload, key, ids, W, c_hi, n_chunks, lam, split_chunks):
    """Run ``n_chunks`` chunks from ``c_hi - 1`` down, as segments of ``split_chunks`` (Remark 2).

    ``M_{n1,0}(W) = M_{n2,0}(M_{n1,n2}(W))``: each segment starts from the state the previous
    one ended in. Returns ``W`` (a host array).
    """
    B = ids.shape[0]
    if B >= _SHARD_MIN:  # small batches cost more in device synchronisation than they gain
        W, ids = shard_batch(batch_mesh(batch_devices(B)), W, ids)
    done = 0
    while done < n_chunks:
        m = min(split_chunks, n_chunks - done)
        W = _segment_batch(workload, W, key, ids, jnp.int32(c_hi - done), jnp.int32(m), lam)
        done += m
    return to_host(W)


_SUB = 256
"""Samples whose first two horizons run together on a CPU (:func:`_pair_local`; at most
``max_batch``). Measured, five-class-exp at 0.75 ``lambda_c``,
10,000 samples, CPU time of a call: 0.31 s with groups of 256, 0.34 s with 128, 0.33 s with
512."""

_SUB_OTHER = 4096
"""The same on other backends (a GPU wants wide batches)."""

_MEET_BLOCKS = 2
"""Blocks of ``_BLOCK`` jobs that the upper trajectory of a group runs beside the lower one in
:func:`_pair_local` before the samples whose two trajectories have not met move to
:func:`_pair_more` (measured, five-class-exp at 0.75 ``lambda_c``, ``F`` = 1024: 25% of the
samples have not met after one block, 14% after two, 6% after four, 1.5% after eight; a group
of 128 that waits for its last sample runs about 730 jobs)."""

_MORE_SUB = 32
"""Group size of :func:`_pair_more` on a CPU: one shape whatever the number of samples left
(a size chosen from their number gave compilations inside timed calls), small enough that a
few samples left waste little."""

_MORE_ROWS = 1024
"""Rows per device of a call of :func:`_pair_more` on a CPU (a fixed shape: one compilation
per group size; only the groups holding samples run)."""

_PAIR_CAP = 1 << 15
"""Most samples per device in one call of :func:`_first_pair` (bounds its output memory)."""


def _both_blocks(workload, key, lam, ids, f_chunks, dtype):
    """``(inputs, step, step1)``: the inputs of block ``q`` (oldest first) of jobs ``-F .. -1``
    of the samples ``ids`` (``F = f_chunks * CHUNK``), a scan step feeding one job to the lower
    and upper states stacked into one batch ``W2`` (lower rows first), and the FCFS step of a
    batch."""
    per_chunk = CHUNK // _BLOCK
    step1 = jax.vmap(FCFSRecurrence((workload.s,)).step)

    def inputs(q):
        c = f_chunks - 1 - q // per_chunk
        a, sg, t, _ = chunk_inputs(
            workload, key, ids, c, lam, dtype, block=q % per_chunk, length=_BLOCK
        )
        return lax.optimization_barrier((a, sg, t))

    def step(W2, x):
        return step1(W2, *(jnp.concatenate([v, v]) for v in x)), None

    return inputs, step, step1


def _meet(W2, met, steps, q, q_hi, scan_block):
    """Feed blocks ``q .. q_hi - 1`` to the stacked states ``W2`` until every lower state
    equals its upper one at the end of a block (from there on they stay equal). The test is
    made once per block: a per-job test (even of one coordinate) kept XLA:CPU from compiling
    the scan into a tight loop (measured: 13 -> 43 ns per sample-job). ``steps`` counts the
    jobs fed until the two met (a multiple of ``_BLOCK``). Returns ``(q, W2, met, steps)``."""
    n = met.shape[0]

    def cond(carry):
        q, _, met, _ = carry
        return (q < q_hi) & ~jnp.all(met)

    def body(carry):
        q, W2, met, steps = carry
        W2 = scan_block(W2, q)
        steps = steps + jnp.where(met, 0, _BLOCK).astype(steps.dtype)
        return q + 1, W2, met | jnp.all(W2[:n] == W2[n:], axis=1), steps

    return lax.while_loop(cond, body, (q, W2, met, steps))


def _pair_local(workload, key, lam, start, count, f_chunks, sub, cap, dtype):
    """One device's share of :func:`_first_pair`: samples ``start .. start + count - 1`` (at
    most ``cap``) in groups of ``sub``.

    For each group: the past ``M_{2F, F}(0)`` (jobs ``-2F .. -F - 1`` from the empty state,
    ``F = f_chunks * CHUNK``); then jobs ``-F .. -1`` fed at once to the lower trajectory (from
    the empty state: ``M_F``) and to the upper one (from the past: ``M_{2F}``), one draw of the
    inputs for both, for ``_MEET_BLOCKS`` blocks or until all have met (:func:`_meet`); then the
    lower one alone. Returns ``(M_F, lower, upper, met, steps, blocks)`` with ``cap`` rows:
    ``lower`` and ``upper`` the two states when the upper one stopped (``upper`` is
    ``M_{2F}`` if that was at job 0), ``met``, ``steps`` as :func:`_meet`, ``blocks`` the
    blocks both ran, per group.
    """
    s = workload.s
    n_blocks = f_chunks * (CHUNK // _BLOCK)
    n_sub = (count + sub - 1) // sub
    zeros = jnp.zeros((sub, s), dtype)
    int_t = jnp.int64 if jax.config.jax_enable_x64 else jnp.int32

    def group(j, out):
        M, L, U, H, St, Bl = out
        lane = j * sub + jnp.arange(sub, dtype=jnp.int32)
        ids = start + lane
        inputs, step, step1 = _both_blocks(workload, key, lam, ids, f_chunks, dtype)

        def past(k, W):
            c = 2 * f_chunks - 1 - k
            return _chunk(workload, W, key, ids, c, lam)

        def lower_only(q, W):
            return lax.scan(lambda W, x: (step1(W, *x), None), W, inputs(q))[0]

        Wu = lax.fori_loop(0, f_chunks, past, zeros)
        met = (Wu[:, -1] == 0) | (lane >= count)
        q, W2, met, steps = _meet(
            jnp.concatenate([zeros, Wu]),
            met,
            jnp.zeros(sub, int_t),
            jnp.int32(0),
            jnp.minimum(n_blocks, _MEET_BLOCKS),
            lambda W2, q: lax.scan(step, W2, inputs(q))[0],
        )
        Wl = lax.fori_loop(q, n_blocks, lower_only, W2[:sub])
        r = j * sub
        M = lax.dynamic_update_slice_in_dim(M, Wl, r, 0)
        L = lax.dynamic_update_slice_in_dim(L, W2[:sub], r, 0)
        U = lax.dynamic_update_slice_in_dim(U, W2[sub:], r, 0)
        H = lax.dynamic_update_slice_in_dim(H, met, r, 0)
        St = lax.dynamic_update_slice_in_dim(St, steps, r, 0)
        return M, L, U, H, St, Bl.at[j].set(q)

    out = (
        jnp.zeros((cap, s), dtype),
        jnp.zeros((cap, s), dtype),
        jnp.zeros((cap, s), dtype),
        jnp.ones(cap, bool),
        jnp.zeros(cap, int_t),
        jnp.zeros(cap // sub, jnp.int32),
    )
    return lax.fori_loop(0, n_sub, group, out)


def _first_pair_impl(workload, key, lam, starts, counts, f_chunks, sub, cap, dtype, ndev):
    """:func:`_pair_local` on ``ndev`` devices, device ``d`` taking ``starts[d]`` and
    ``counts[d]``; outputs stacked device after device (``cap`` rows each)."""

    def local(st, ct):
        return _pair_local(workload, key, lam, st[0], ct[0], f_chunks, sub, cap, dtype)

    if ndev == 1:
        return local(starts, counts)
    spec = PartitionSpec(BATCH)
    mesh = batch_mesh(jax.devices()[:ndev])
    smap = jax.shard_map(local, mesh=mesh, in_specs=(spec, spec), out_specs=spec, check_vma=False)
    return smap(starts, counts)


_first_pair = _jit_per_backend(_first_pair_impl, static_argnames=("sub", "cap", "dtype", "ndev"))


def _pair_more_local(workload, key, lam, ids, Wl, Wu, met, count, q, q_hi, f_chunks, sub):
    """:func:`_meet` from block ``q`` for the first ``count`` rows of ``ids`` (lower states
    ``Wl``, upper ``Wu``), in groups of ``sub`` rows, each until its rows have met or
    ``q_hi``. Returns ``(Wl, Wu, met, steps, blocks)`` (``blocks``: per group)."""
    int_t = jnp.int64 if jax.config.jax_enable_x64 else jnp.int32
    cap = ids.shape[0]

    def group(j, out):
        Wl, Wu, met, steps, blocks = out
        r = j * sub
        i = lax.dynamic_slice_in_dim(ids, r, sub)
        inputs, step, _ = _both_blocks(workload, key, lam, i, f_chunks, Wl.dtype)
        W2 = jnp.concatenate(
            [lax.dynamic_slice_in_dim(Wl, r, sub), lax.dynamic_slice_in_dim(Wu, r, sub)]
        )
        m = lax.dynamic_slice_in_dim(met, r, sub)
        qe, W2, m, st = _meet(
            W2, m, jnp.zeros(sub, int_t), q, q_hi, lambda W2, q: lax.scan(step, W2, inputs(q))[0]
        )
        return (
            lax.dynamic_update_slice_in_dim(Wl, W2[:sub], r, 0),
            lax.dynamic_update_slice_in_dim(Wu, W2[sub:], r, 0),
            lax.dynamic_update_slice_in_dim(met, m, r, 0),
            lax.dynamic_update_slice_in_dim(steps, st, r, 0),
            blocks.at[j].set(qe - q),
        )

    out = (Wl, Wu, met, jnp.zeros(cap, int_t), jnp.zeros(cap // sub, jnp.int32))
    return lax.fori_loop(0, (count + sub - 1) // sub, group, out)


def _pair_more_impl(workload, key, lam, ids, Wl, Wu, met, counts, q, q_hi, f_chunks, sub, ndev):
    """:func:`_pair_more_local` on ``ndev`` devices (rows split evenly, ``counts[d]`` real rows
    at the start of device ``d``'s share)."""

    def local(ids, Wl, Wu, met, ct):
        return _pair_more_local(workload, key, lam, ids, Wl, Wu, met, ct[0], q, q_hi, f_chunks, sub)

    if ndev == 1:
        return local(ids, Wl, Wu, met, counts)
    spec = PartitionSpec(BATCH)
    mesh = batch_mesh(jax.devices()[:ndev])
    smap = jax.shard_map(local, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
    return smap(ids, Wl, Wu, met, counts)


_pair_more = _jit_per_backend(_pair_more_impl, static_argnames=("sub", "ndev"))


def _group_size(rows: int, on_cpu: bool, max_batch: int) -> int:
    """Group size of the side-by-side kernels for ``rows`` samples: the largest power of two
    up to ``_SUB`` (``_SUB_OTHER`` off the CPU) and ``max_batch`` whose padding of the last
    group wastes at most an eighth of the rows (few sizes: few compilations)."""
    top = min(_SUB if on_cpu else _SUB_OTHER, max_batch)
    size = 1 << max(top.bit_length() - 1, 0)
    while size > 8 and -(-rows // size) * size - rows > rows // 8:
        size //= 2
    return size


def _meet_batches(run: _Batcher, ids, Wl, Wu, met, f_chunks: int, q: int, seg: int):
    """Feed jobs ``-F .. -1`` (``F = f_chunks * CHUNK``) from block ``q`` on to the lower states
    ``Wl`` and the upper states ``Wu`` of the samples ``ids`` side by side until the two meet
    (:func:`_meet`), in segments of ``seg``, ``2 seg``, ... blocks, the samples that have met
    leaving the batch after each. Returns ``(Wl, Wu, met, steps)`` (host arrays; ``steps`` the
    jobs fed from block ``q`` until the two were seen to meet)."""
    n_blocks = f_chunks * (CHUNK // _BLOCK)
    Wl, Wu, met = Wl.copy(), Wu.copy(), met.copy()
    steps = np.zeros(ids.size, np.int64)
    on_cpu = jax.default_backend() == "cpu"
    rem = np.flatnonzero(~met)
    while rem.size and q < n_blocks:
        m = min(seg, n_blocks - q)
        ndev = jax.device_count() if rem.size >= _SHARD_MIN and jax.process_count() == 1 else 1
        cap = _MORE_ROWS if on_cpu else _SUB_OTHER
        for lo in range(0, rem.size, ndev * cap):
            part = rem[lo : lo + ndev * cap]
            per = -(-part.size // ndev)
            sub = min(_MORE_SUB if on_cpu else _SUB_OTHER, 1 << (run.max_batch.bit_length() - 1))
            rows = np.full((ndev, cap), part[-1])
            real = np.zeros((ndev, cap), bool)
            counts = np.zeros(ndev, np.int32)
            for d in range(ndev):
                mine = part[d * per : (d + 1) * per]
                rows[d, : mine.size], real[d, : mine.size], counts[d] = mine, True, mine.size
            rows, real = rows.reshape(-1), real.reshape(-1)
            out = _pair_more(
                run.workload,
                run.key,
                run.lam,
                jnp.asarray(ids[rows], jnp.int32),
                jnp.asarray(Wl[rows]),
                jnp.asarray(Wu[rows]),
                jnp.asarray(~real),
                jnp.asarray(counts),
                jnp.int32(q),
                jnp.int32(q + m),
                jnp.int32(f_chunks),
                sub=sub,
                ndev=ndev,
            )
            Lo, Uo, mo, so, bo = (to_host(x) for x in out)
            rr = rows[real]
            Wl[rr], Wu[rr], met[rr] = Lo[real], Uo[real], mo[real]
            steps[rr] += so[real]
            run.work_done += 2 * sub * int(bo.sum()) * _BLOCK
        rem = rem[~met[rem]]
        q += m
        seg *= 2
    return Wl, Wu, met, steps


def _first_doubling(run: _Batcher, st: _Samples, n: int, F: int) -> np.ndarray:
    """Algorithm 1's first two horizons ``F`` and ``2 F`` for the samples ``0 .. n - 1``: the
    same states, stopping horizons and flags as two :func:`_double` calls, with the inputs of
    jobs ``-F .. -1`` drawn once for ``M_F`` and ``M_{2F}`` and the test ``M_{2F} == M_F``
    made by running the two trajectories side by side until they meet (:func:`_pair_local`
    for all samples, then :func:`_pair_more` for the few whose trajectories have not met, in
    compacted batches over segments of 1, 2, 4, ... times ``_MEET_BLOCKS`` blocks). The work
    needed counts the replay of jobs ``-F .. -1`` until the two trajectories were seen to
    meet (at the end of a block). Returns the samples still active (``M_{2F} != M_F``)."""
    on_cpu = jax.default_backend() == "cpu"
    ndev = jax.device_count() if n >= _SHARD_MIN and jax.process_count() == 1 else 1
    fc = F // CHUNK
    n_blocks = F // _BLOCK
    s = st.M.shape[1]
    M = np.empty((n, s), st.M.dtype)
    W2 = np.empty((n, 2, s), st.M.dtype)
    met = np.empty(n, bool)
    steps = np.empty(n, np.int64)
    lo = 0
    while lo < n:
        per = min(-(-(n - lo) // ndev), _PAIR_CAP)
        sub = _group_size(per, on_cpu, run.max_batch)
        cap = sub
        while cap < per:
            cap *= 2
        starts = np.array([lo + d * per for d in range(ndev)], np.int32)
        counts = np.clip(n - starts, 0, per).astype(np.int32)
        out = _first_pair(
            run.workload,
            run.key,
            run.lam,
            jnp.asarray(starts),
            jnp.asarray(counts),
            jnp.int32(fc),
            sub=sub,
            cap=cap,
            dtype=jnp.dtype(run.dtype),
            ndev=ndev,
        )
        Md, Ld, Ud, Hd, Sd, Bd = (to_host(x) for x in out)
        for d in range(ndev):
            k = int(counts[d])
            if k == 0:
                continue
            a, r = int(starts[d]), d * cap
            M[a : a + k], met[a : a + k], steps[a : a + k] = (
                Md[r : r + k],
                Hd[r : r + k],
                Sd[r : r + k],
            )
            W2[a : a + k, 0], W2[a : a + k, 1] = Ld[r : r + k], Ud[r : r + k]
            groups = -(-k // sub)
            blocks = Bd.reshape(ndev, -1)[d, :groups]
            run.work_done += sub * (groups * 2 * F + int(blocks.sum()) * _BLOCK)
        lo += ndev * per
    # The samples whose trajectories have not met: side by side on, in compacted batches.
    q = min(n_blocks, _MEET_BLOCKS)
    _, U, met, more = _meet_batches(run, np.arange(n), W2[:, 0], W2[:, 1], met, fc, q, q)
    steps += more
    idx = np.arange(n)
    st.needed[idx] += 2 * F + np.where(met, steps, F)
    st.stop_ell[idx] = 2 * F
    same = met | np.all(U == M, axis=1)
    new = np.where(met[:, None], M, U)
    st.record(2 * F, idx, M, new)
    st.M[idx] = new
    st.converged[idx[same]] = True
    return idx[~same]


def loynes_state(
    workload: Workload, key, ids, ell: int, lam, dtype, *, split_chunks: int = 1 << 12
):
    """``M_ell`` (eq. (4)) of the samples ``ids``: start empty at job ``-ell``, feed to ``-1``.

    ``ell`` must be a multiple of ``CHUNK``. The horizon is run in segments of at most
    ``split_chunks`` chunks composed by Remark 2.
    """
    ids = jnp.asarray(ids, dtype=jnp.int32)
    W = jnp.zeros((ids.shape[0], workload.s), dtype)
    return _run(workload, key, ids, W, ell // CHUNK, ell // CHUNK, lam, split_chunks)


class BiasTest(NamedTuple):
    """One batch-level bias test of the samples ``X(ell)`` (module docstring, 2).

    Attributes:
        ell: the batch horizon of the samples tested, ``X(ell)``.
        kind: ``"loynes"`` (the first test: increments ``M_{2 ell} - M_ell``) or ``"paired"``
            (the later ones: ``X(ell) - X(ell / 2)``).
        diff: mean paired difference of the mean wait (>= 0).
        diff_se: its standard error.
        diff_class: ``(classes,)`` the mean paired difference of each class's wait.
        half_width: half-width of the mean-wait interval of ``X(ell)`` at the test's level.
        bound: the bias bound of the mean wait of ``X(ell)``.
        bound_class: ``(classes,)`` the same bound for each class's mean wait.
        ok: ``bound <= bias_tol * half_width``.
        jump: ``(1 + classes,)`` mean nonzero difference of the mean wait and of each class's
            (this test's, else the previous one's): the size the rule-of-three floor of the
            bounds uses when fewer than 3 differ.
        step: ``(1 + classes,)`` upper bound of the mean differences themselves (the bound
            before the geometric factor): for a paired test, what ``X(ell / 2)`` lacks of
            ``X(ell)`` (:func:`_shortest_horizon`).
    """

    ell: int
    kind: str
    diff: float
    diff_se: float
    diff_class: np.ndarray
    half_width: float
    bound: float
    bound_class: np.ndarray
    ok: bool
    jump: np.ndarray | None = None
    step: np.ndarray | None = None

    def as_dict(self) -> dict:
        return {
            "ell": int(self.ell),
            "kind": self.kind,
            "diff": float(self.diff),
            "diff_se": float(self.diff_se),
            "half_width": float(self.half_width),
            "bias_bound": float(self.bound),
            "ok": bool(self.ok),
        }


class BackwardSamples(Result):
    """Sub-perfect samples of the stationary ordered workload seen by an arriving job.

    Attributes:
        W: ``(n, s)`` ascending workload vectors (Palm distribution at arrivals).
        converged: ``(n,)`` whether Algorithm 1 met its stopping rule before ``max_ell``.
        ell: ``(n,)`` the horizon at which each sample stopped.
        lam: the arrival rate.
        status: ``Status.ok``, ``Status.unconverged`` (some sample hit the cap) or
            ``Status.biased`` (the batch bias test failed at the horizon or work cap, or
            did not run).
        work_done: jobs processed, batch padding included.
        work_needed: jobs Algorithm 1 needs for these samples run one by one (each replay
            counted until it was seen to meet the previous trajectory, at the end of a
            block of ``_BLOCK`` jobs).
        key: the key the samples were drawn with (metrics draw job 0's size from it).
        bias_bound: bound of the downward bias of the mean wait (0 without bias control).
        bias_bound_class: ``(classes,)`` the same for each class's mean wait, or ``None``.
        ell_batch: the batch horizon ``F`` of the samples ``X(F)`` (0 without bias control).
        ell_more: the horizon ``H <= F`` of the samples drawn after the pilot under a time
            budget (module docstring, 4; 0 when none were).
        bias_tests: the batch tests run, oldest first (:class:`BiasTest`).
        elapsed_s: wall time of the sampling.
    """

    W: np.ndarray
    converged: np.ndarray
    ell: np.ndarray
    lam: float
    status: Status
    work_done: int
    work_needed: int
    key: jax.Array
    bias_bound: float = 0.0
    bias_bound_class: np.ndarray | None = None
    ell_batch: int = 0
    ell_more: int = 0
    bias_tests: tuple = ()
    elapsed_s: float = 0.0

    @property
    def n(self) -> int:
        return self.W.shape[0]

    @property
    def n_unconverged(self) -> int:
        return int(np.sum(~self.converged))

    def status_reason(self) -> str:
        """Why the status is not ``ok``, in one line."""
        if self.status == Status.unconverged:
            return (
                f"{self.n_unconverged} of {self.n} samples hit max_ell or the work budget "
                f"max_work (work done: {self.work_done:.3g} sample-jobs) before meeting "
                "Algorithm 1's stopping rule (lower bounds); raise max_ell or max_work"
            )
        if not self.bias_tests:
            return "Algorithm 1 alone (bias_control=False): the bias is not bounded"
        return (
            f"the batch bias test still failed at horizon {self.ell_batch} (max_ell / "
            f"max_work); bias bound {self.bias_bound:.4g}"
        )

    @property
    def work_ratio(self) -> float:
        """Work done over work needed (1 means no sample waited for another)."""
        return self.work_done / max(self.work_needed, 1)


_CACHE_BYTES = 1 << 17
"""Workload-state bytes per device that a batch of samples should not exceed (measured on a
2-core x86-64 CPU, two-class-256 in float32, 2000 samples: batches of 4096, 512, 128 and 64
took 18.1, 18.3, 12.3 and 12.6 s; five-class-exp is as fast with 512 as with 4096)."""


def _cache_batch(s: int, itemsize: int, min_batch: int) -> int:
    """Largest batch ``min_batch * 8^k`` (at most 4096, at least ``8 min_batch``) whose
    workload states take at most ``_CACHE_BYTES`` per device: the step reads and writes every
    state of the batch, which is memory-bound once the batch leaves the cache."""
    per_device = _CACHE_BYTES * max(jax.device_count(), 1) // (s * itemsize)
    size = 8 * min_batch
    while size * 8 <= min(per_device, 4096):
        size *= 8
    return size


def _pieces(n: int, min_batch: int, max_batch: int) -> list[int]:
    """Split ``n`` active samples into batches of sizes ``min_batch * 8^k <= max_batch``.

    Greedy, largest first; only the last batch (fewer than ``min_batch`` samples) is padded.
    Few distinct sizes means few compilations; small sizes late in the doubling mean no batch
    waits for samples that have already converged.
    """
    sizes = [min_batch]
    while sizes[-1] * 8 <= max_batch:
        sizes.append(sizes[-1] * 8)
    out = []
    rest = n
    for size in reversed(sizes):
        while rest >= size:
            out.append(size)
            rest -= size
    if rest > 0:
        out.append(min_batch)
    return out


@dataclass
class _Batcher:
    """Runs sets of samples through :func:`_run` in batches of ladder sizes; counts the work."""

    workload: Workload
    key: jax.Array
    lam: float
    dtype: np.dtype
    split_chunks: int
    min_batch: int
    max_batch: int
    work_done: int = 0

    def __call__(self, ids, W0, c_hi, n_chunks):
        """Run samples ``ids`` from states ``W0`` through chunks ``c_hi - 1`` down
        (``n_chunks`` of them). Returns the host states."""
        outs = []
        start = 0
        for p in _pieces(ids.size, self.min_batch, self.max_batch):
            real = min(p, ids.size - start)
            idx = ids[start : start + p]
            W = W0[start : start + p]
            if idx.size < p:
                idx = np.concatenate([idx, np.full(p - idx.size, idx[-1])])
                W = np.concatenate([W, np.repeat(W[-1:], p - W.shape[0], axis=0)])
            W = _run(
                self.workload,
                self.key,
                jnp.asarray(idx, dtype=jnp.int32),
                jnp.asarray(W, self.dtype),
                c_hi,
                n_chunks,
                self.lam,
                self.split_chunks,
            )
            self.work_done += p * n_chunks * CHUNK
            outs.append(np.asarray(W)[:real])
            start += p
        return np.concatenate(outs)


@dataclass
class _Samples:
    """The samples in progress: states, stopping horizons, flags, work needed, and the Loynes
    increments of the waits at the first comparison ``probe = 2 F`` of Algorithm 1
    (``first_increment``, ``(n, 1 + classes)``: the mean wait and each class's wait of
    ``M_{2F}`` minus those of ``M_F``; 0 for a sample that never reached it)."""

    M: np.ndarray
    stop_ell: np.ndarray
    converged: np.ndarray
    needed: np.ndarray
    cols: np.ndarray
    probs: np.ndarray
    probe: int
    first_increment: np.ndarray

    _PER_SAMPLE = ("M", "stop_ell", "converged", "needed")

    @classmethod
    def empty(cls, workload: Workload, n: int, dtype, first: int) -> _Samples:
        _, cores, probs, _, _ = workload_fields(workload)
        M = np.zeros((n, workload.s), dtype)
        z = np.zeros(n, np.int64)
        inc = np.zeros((n, cores.size + 1))
        return cls(M, z.copy(), np.zeros(n, bool), z.copy(), cores - 1, probs, 2 * first, inc)

    @classmethod
    def concat(cls, parts: list[_Samples]) -> _Samples:
        """The samples of ``parts`` one after the other (the first part's probe and
        increments: the bias test reads only those)."""
        if len(parts) == 1:
            return parts[0]
        a = parts[0]
        cat = {f: np.concatenate([getattr(x, f) for x in parts]) for f in _Samples._PER_SAMPLE}
        return dataclasses.replace(a, **cat)

    def waits(self, M: np.ndarray) -> np.ndarray:
        """``(n, 1 + classes)``: the mean wait ``sum_c p_c W^{alpha_c}`` and each class's."""
        w = np.asarray(M, np.float64)[:, self.cols]
        return np.concatenate([(w @ self.probs)[:, None], w], axis=1)

    def record(self, ell: int, active, old: np.ndarray, new: np.ndarray) -> None:
        """Keep the increments of the first comparison (the only ones the bias test reads)."""
        if ell == self.probe:
            self.first_increment[active] = self.waits(new) - self.waits(old)


def _double(run: _Batcher, st: _Samples, active, prev_ell: int, ell: int) -> np.ndarray:
    """One doubling of Algorithm 1 (lines 6-12) for the samples ``active``: ``M_prev -> M_ell``.

    ``st.M[active]`` holds ``M_prev_ell`` (ignored when ``prev_ell == 0``). Returns the samples
    still active (``M_ell != M_prev_ell``).
    """
    na = active.size
    s = st.M.shape[1]
    # Jobs -ell .. -prev_ell - 1 from the empty state: X = M_{ell, prev_ell}(0).
    empty = np.zeros((na, s), st.M.dtype)
    X = run(active, empty, ell // CHUNK, (ell - prev_ell) // CHUNK)
    st.needed[active] += ell - prev_ell
    st.stop_ell[active] = ell
    if prev_ell == 0:
        st.M[active] = X
        return active
    # Jobs -prev_ell .. -1 replayed from X (Remark 2) beside the previous trajectory (from the
    # empty state at -prev_ell, drawn again), until the two meet (then M_ell = M_prev): in
    # segments of 2, 4, 8, ... blocks, the samples that have met leaving the batch after each,
    # so no batch waits for samples that have already coupled.
    met = X[:, -1] == 0
    _, W, met, steps = _meet_batches(
        run, active, np.zeros_like(X), X, met, prev_ell // CHUNK, 0, _MEET_BLOCKS
    )
    st.needed[active] += np.where(met, steps, prev_ell)
    same = met | np.all(W == st.M[active], axis=1)
    new = np.where(met[:, None], st.M[active], W)
    st.record(ell, active, st.M[active], new)
    st.M[active] = new
    st.converged[active[same]] = True
    return active[~same]


def _algorithm1(run, st, active, prev_ell, ell, max_ell, progress, max_work=None) -> None:
    """Algorithm 1 (``mjsre`` 4.4) for the samples ``active`` from horizon ``ell``.

    ``st.M[active]`` holds ``M_prev_ell`` (``prev_ell = 0``: start from scratch). Doubles
    until every sample met ``M_{2 ell} == M_ell``, ``ell`` passed ``max_ell``, or the next
    doubling's new past alone (``ell - prev_ell`` jobs per active sample, a lower bound of its
    cost) would take ``run.work_done`` past ``max_work``; the samples left are not converged.
    """
    n = st.M.shape[0]
    st.converged[active] = False
    whole = prev_ell == 0 and active.size == n and np.array_equal(active, np.arange(n))
    if whole and 2 * ell <= max_ell:
        # the first two horizons in one pass (the inputs of jobs -ell .. -1 drawn once)
        if progress is not None:
            progress(ell, n, 0)
            progress(2 * ell, n, 0)
        active = _first_doubling(run, st, n, ell)
        prev_ell, ell = 2 * ell, 4 * ell
    while active.size and ell <= max_ell:
        if max_work is not None and run.work_done + active.size * (ell - prev_ell) > max_work:
            break
        if progress is not None:
            progress(ell, int(active.size), int(n - active.size))
        active = _double(run, st, active, prev_ell, ell)
        prev_ell, ell = ell, 2 * ell


# ---------------------------------------------------------------------------------------------
# Batch-level bias control (module docstring, issue 14)
# ---------------------------------------------------------------------------------------------


def _relaxation_jobs(rho: float) -> float:
    """Jobs arriving during ``_RELAX_TIMES`` relaxation times of an M/M/1 queue at load
    ``rho``: ``rho / (1 - sqrt(rho))^2`` each (``1 / (mu (1 - sqrt(rho))^2)`` in time)."""
    return _RELAX_TIMES * rho / (1.0 - math.sqrt(rho)) ** 2


def _lambda_c(workload: Workload, limit) -> float:
    """``lambda_c`` for :func:`horizon_floor`: ``limit``'s where the caller passes one, else
    the closed form eq. (8) or the bound ``lambda_ideal`` (no estimate behind a sampler)."""
    if limit is not None and getattr(limit, "lambda_c", limit) is not None:
        return float(getattr(limit, "lambda_c", limit))
    closed = lambda_c_closed_form(workload)
    return float(workload.lambda_ideal()) if closed is None else closed


def horizon_floor(workload: Workload, lam: float, limit=None) -> int:
    """The first horizon of :func:`sample_backward` by default (module docstring, 3).

    The larger of ``8 / p_min`` jobs and 4 M/M/1 relaxation times at ``rho = lam /
    lambda_c``, rounded up to ``CHUNK * 2^k``, capped at ``2^16``. ``lambda_c`` comes from
    ``limit`` (else a closed form or ``lambda_ideal``); it is only read when the upper bound
    ``rho <= lam E[sigma]`` (``1 / E[sigma]`` is a lower bound of ``lambda_c``) does not
    already put the relaxation term below the rare-class term.
    """
    _, _, probs, laws, _ = workload_fields(workload)
    jobs = _RARE_JOBS / float(np.min(probs))
    rho_up = float(lam) * float(np.sum(probs * np.array([float(x.mean()) for x in laws])))
    if jobs < _FLOOR_CAP and not (rho_up < 1 and _relaxation_jobs(rho_up) <= jobs):
        lc = _lambda_c(workload, limit)
        rho = min(float(lam) / lc, 0.999)
        jobs = max(jobs, _relaxation_jobs(rho))
    floor = CHUNK
    while floor < min(jobs, _FLOOR_CAP):
        floor *= 2
    return floor


def _bias_test(d, waits, F, kind, prev: BiasTest | None, level: float, tol: float):
    """A batch test of the samples ``X(F)`` (mean and class waits ``waits``) from the paired
    differences ``d`` (``(n, 1 + classes)``: the mean wait, then each class).

    The bound is the upper confidence bound of the mean difference times ``max(1, r / (1 -
    r))``, ``r`` its ratio to the previous test of the same kind (clipped to 0.9; 1 without);
    when fewer than 3 differences are nonzero, at least ``3 jump / n`` (rule of three).
    """
    from ..stats import t_quantile

    n = d.shape[0]
    z = t_quantile(n, level)
    mean = d.mean(axis=0)
    se = d.std(axis=0, ddof=1) / math.sqrt(n)
    factor = np.ones_like(mean)
    decaying = True
    if prev is not None and prev.kind == kind:
        before = np.concatenate([[prev.diff], prev.diff_class])
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(before > 0, mean / before, np.where(mean > 0, np.inf, 0.0))
        # a significant difference that does not shrink: the geometric tail bounds nothing
        # (a difference that is noise around 0 gives a meaningless ratio)
        decaying = not (r[0] >= 0.9 and mean[0] - z * se[0] > 0)
        r = np.minimum(r, 0.9)
        factor = np.maximum(1.0, r / (1.0 - r))
    # Few samples can move (most coupled long before): all-zero differences give se = 0 and a
    # t bound of 0. Rule of three: no change among n samples puts the share that changes
    # below 3 / n (95%), each by about the mean nonzero difference seen (here or before).
    moved = d != 0
    count = moved.sum(axis=0)
    with np.errstate(invalid="ignore"):
        jump = np.abs(np.where(moved, d, 0.0)).sum(axis=0) / count
    before = prev.jump if prev is not None and prev.jump is not None else np.zeros_like(mean)
    jump = np.where(count > 0, jump, before)
    rare = np.where(count < 3, 3.0 * jump / n, 0.0)
    step = np.maximum(mean + z * se, rare)
    bound = step * factor
    hw = z * float(np.std(waits[:, 0], ddof=1)) / math.sqrt(n)
    return BiasTest(
        ell=int(F),
        kind=kind,
        diff=float(mean[0]),
        diff_se=float(se[0]),
        diff_class=mean[1:],
        half_width=hw,
        bound=float(bound[0]),
        bound_class=bound[1:],
        ok=bool(bound[0] <= tol * hw) and decaying,
        jump=jump,
        step=step,
    )


def _shortest_horizon(tests, tol: float) -> tuple[int, np.ndarray]:
    """The shortest tested batch horizon ``H`` whose samples ``X(H)`` keep the bias bound
    within ``tol`` of the passing test's half-width, and that bound (``(1 + classes,)``: the
    mean wait, then each class).

    ``X(H) <= X(2H)`` on the same inputs (Lemma 4.3), so the bias of ``X(H)`` is the mean
    difference ``X(2H) - X(H)`` plus the bias of ``X(2H)``: walking back from the passing
    test at ``F``, ``B(F / 2) = step(F) + B(F)``, ``B(F / 4) = step(F / 2) + B(F / 2)``, ...,
    over the paired tests (``step``: their upper bounds of the mean differences). The
    samples after the pilot are drawn at ``H``: half the cost per halving (on two-class-256 at
    0.8 ``lambda_c`` the test passed at ``F = 131072`` with a difference of 0.05 +- 0.05
    against a half-width of 12.8, so ``X(65536)``, bounded by 0.30, costs half as much).
    """
    last = tests[-1]
    H, B = last.ell, np.concatenate([[last.bound], last.bound_class])
    for t in reversed(tests):
        if t.kind != "paired" or t.ell != H:  # a Loynes test, or a horizon jumped over
            break
        nxt = B + t.step
        if nxt[0] > tol * last.half_width:
            break
        H, B = H // 2, nxt
    return H, B


def _control_bias(run, st, F, max_ell, max_work, level, tol, progress, on_test):
    """Double the batch horizon ``F`` until the bias test passes (module docstring, 2).

    The first test reads the Loynes increments ``M_{2F} - M_F`` that Algorithm 1 computed;
    each later one the paired differences ``X(F) - X(F / 2)``. ``X(2F)`` differs from ``X(F)``
    only for the samples that stopped at their first comparison (``stop_ell == 2F``): those
    rerun Algorithm 1 from their ``M_{2F}``. Returns ``(F, tests, passed)``; ``passed`` is
    False when the test still failed where the next doubling would pass ``max_ell`` or the
    work budget ``max_work``.
    """
    waits = st.waits(st.M)
    tests = [_bias_test(st.first_increment, waits, F, "loynes", None, level, tol)]
    while True:
        if on_test is not None:
            on_test(tests[-1])
        if tests[-1].ok:
            return F, tests, True
        rerun = np.flatnonzero(st.converged & (st.stop_ell == 2 * F))
        while rerun.size == 0 and 8 * F <= max_ell:
            # Every sample went past 2F: X(2F) = X(F), a paired test would read 0 and prove
            # nothing; the horizon moves on to where some samples stopped.
            F *= 2
            rerun = np.flatnonzero(st.converged & (st.stop_ell == 2 * F))
        if rerun.size == 0 or 4 * F > max_ell or run.work_done + rerun.size * 4 * F > max_work:
            return F, tests, False
        _algorithm1(run, st, rerun, 2 * F, 4 * F, max_ell, progress)
        F *= 2
        old, waits = waits, st.waits(st.M)
        tests.append(_bias_test(waits - old, waits, F, "paired", tests[-1], level, tol))


def sample_backward(
    workload,
    lam: float,
    n_samples: int,
    *,
    key,
    ell0: int | None = None,
    max_ell: int = 1 << 22,
    dtype=None,
    split_chunks: int = 1 << 12,
    min_batch: int = 8,
    max_batch: int | None = None,
    limit=None,
    override: bool = False,
    progress: Callable[[int, int, int], None] | None = None,
    bias_control: bool = True,
    bias_tol: float = 0.25,
    level: float = 0.95,
    max_work: int | None = None,
    on_test: Callable[[BiasTest], None] | None = None,
    max_seconds: float | None = None,
    throw: bool = False,
) -> BackwardSamples:
    """Draw ``n_samples`` independent sub-perfect samples by Algorithm 1 (``mjsre`` 4.4),
    with the batch-level bias control of the module docstring.

    Args:
        workload: a ``jaxqueue.mjqm.Workload`` (servers, per-class cores, probabilities and
            service laws; Poisson arrivals unless it carries an inter-arrival law).
        lam: arrival rate; must be below the stability limit ``lambda_c``.
        n_samples: number of independent samples.
        key: PRNG key; sample ``i`` depends only on ``(key, i)`` and the batch horizon.
        ell0: first horizon (rounded up to a multiple of ``CHUNK`` = 256 jobs); default
            :func:`horizon_floor`.
        max_ell: cap on the horizon, per sample (samples not converged there are flagged
            ``unconverged``) and for the batch test (``biased``).
        dtype: float dtype of the workload state (default: JAX's default float).
        split_chunks: longest segment per device call, in chunks (Remark 2).
        min_batch: smallest batch run (remainders are padded up to it); the pasts of the
            later doublings run in batches of sizes ``min_batch * 8^k`` up to ``max_batch``
            (one compilation per size).
        max_batch: largest batch per device call, and largest group of samples run together
            by the side-by-side kernels (at most ``_SUB`` on a CPU); default
            :func:`_cache_batch` (the batch's workload states fit in a core's cache:
            two-class-256 in float32, 1.5x faster with batches of 64 than of 4096).
        limit: a :class:`~jaxqueue.mjqm.StabilityResult` of
            :func:`~jaxqueue.mjqm.stability_limit`, a number, or ``None``: ``lam`` is refused
            at or beyond it (below the lower end of an estimate's interval) and the default
            ``ell0`` reads it; without it only ``lambda_ideal`` and eq. (8) are checked.
        override: skip the stability checks (``lam >= lambda_c`` gives unconverged samples).
        progress: optional callback ``(ell, n_active, n_done)`` called at each doubling.
        bias_control: run the batch-level bias test (False: Algorithm 1 alone, as printed).
        bias_tol: the test passes when the bias bound is at most this fraction of the
            half-width of the mean-wait interval.
        level: confidence level of the test (its bound and the half-width).
        max_work: budget of sample-jobs (``work_done``) of Algorithm 1 and the batch
            doublings together; default ``2^39 / s``. No doubling of Algorithm 1 or of
            the batch starts that would pass it (samples still doubling give
            ``unconverged``, a test still failing ``biased``): a bound on the run time
            whatever the workload (``borg-cell-b``, s = 2048, ran for more than
            15 minutes at 0.9 ``lambda_c`` before Algorithm 1 had this budget).
        on_test: optional callback called with each :class:`BiasTest`.
        max_seconds: time budget (module docstring, 4): the bias control runs on a pilot of
            ``_PILOT`` samples and further samples are drawn while the budget lasts, so fewer
            than ``n_samples`` may come back (``BackwardSamples.n``). The pilot runs to its
            end whatever the budget. ``None``: exactly ``n_samples``, all in the bias test.
        throw: raise :class:`~jaxqueue.stats.EstimateError` when the status is not ``ok``
            (default: return the samples with their status).

    Returns:
        :class:`BackwardSamples`.

    Raises:
        ValueError: bad arguments, or ``lam`` at or beyond the stability limit (with the
            estimate of ``lambda_c`` and its interval) unless ``override``.
        EstimateError: with ``throw``, a status other than ``ok``.
    """
    if not (isinstance(n_samples, (int, np.integer)) and n_samples >= 1):
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}")
    lam = float(lam)
    if not (math.isfinite(lam) and lam > 0):
        raise ValueError(f"lam must be finite and > 0, got {lam}")
    if ell0 is not None and (ell0 < 1 or max_ell < ell0):
        raise ValueError(f"need 1 <= ell0 <= max_ell, got ell0={ell0}, max_ell={max_ell}")
    if not bias_tol > 0:
        raise ValueError(f"bias_tol must be > 0, got {bias_tol}")
    if max_seconds is not None and not max_seconds >= 0:
        raise ValueError(f"max_seconds must be >= 0 (or None), got {max_seconds!r}")
    check_plain(workload)
    check_load(workload, lam, limit=limit, override=override)
    dtype = jnp.dtype(dtype) if dtype is not None else jnp.result_type(float)
    if ell0 is None:
        ell0 = min(horizon_floor(workload, lam, limit), max(max_ell // 2, 1))
    ell = CHUNK * max(1, -(-ell0 // CHUNK))
    n = int(n_samples)
    min_batch = max(min_batch, jax.device_count())
    if max_batch is None:
        cpu = jax.default_backend() == "cpu"
        max_batch = _cache_batch(workload.s, dtype.itemsize, min_batch) if cpu else 4096
    t0 = time.perf_counter()
    pilot = n if max_seconds is None else min(n, _PILOT)
    run = _Batcher(workload, key, lam, dtype, split_chunks, min_batch, max_batch)
    st = _Samples.empty(workload, pilot, dtype, ell)
    budget = max_work if max_work is not None else _WORK_BUDGET // workload.s
    _algorithm1(run, st, np.arange(pilot), 0, ell, max_ell, progress, budget)
    tests, passed = [], True
    if bias_control and pilot >= 2:
        ell, tests, passed = _control_bias(
            run, st, ell, max_ell, budget, level, bias_tol, progress, on_test
        )
    parts, ell_more = [st], 0
    bound = np.concatenate([[tests[-1].bound], tests[-1].bound_class]) if tests else None
    if pilot < n and st.converged.all() and passed:
        ell_more, b_more = _shortest_horizon(tests, bias_tol) if tests else (ell, bound)
        deadline = t0 + max_seconds
        parts += _more_samples(run, workload, ell_more, n - pilot, max_ell, deadline, progress)
        extra = sum(p.M.shape[0] for p in parts[1:])
        if tests:  # the bias of the pooled mean: the samples' bounds, weighted by their counts
            bound = (pilot * bound + extra * b_more) / (pilot + extra)
    st = _Samples.concat(parts)
    if not st.converged.all():
        status = Status.unconverged
    else:  # without the batch test (or with one sample) the bias is not controlled
        status = Status.ok if passed and tests else Status.biased
    res = BackwardSamples(
        W=st.M,
        converged=st.converged,
        ell=st.stop_ell,
        lam=lam,
        status=status,
        work_done=int(run.work_done),
        work_needed=int(st.needed.sum()),
        key=key,
        bias_bound=float(bound[0]) if tests else 0.0,
        bias_bound_class=bound[1:] if tests else None,
        ell_batch=int(ell) if bias_control else 0,
        ell_more=int(ell_more) if len(parts) > 1 else 0,
        bias_tests=tuple(tests),
        elapsed_s=time.perf_counter() - t0,
    )
    return res.raise_for_status() if throw else res


def _more_samples(run, workload, F, want, max_ell, deadline, progress) -> list[_Samples]:
    """Up to ``want`` more samples ``X(F)`` (Algorithm 1 from ``F``) before ``deadline``
    (module docstring, 4), in rounds: the first as large as the pilot, then as many as the
    measured seconds per sample leave time for. Round ``r`` draws its samples with the key
    ``fold_in(key, r)`` (independent of the pilot's). The work goes to ``run.work_done``."""
    out, r, per_sample = [], 1, None
    while want > 0:
        left = deadline - time.perf_counter()
        m = _PILOT if per_sample is None else int(0.9 * left / per_sample)
        m = min(want, m)
        if left <= 0 or m < run.min_batch:
            break
        more = dataclasses.replace(run, key=jax.random.fold_in(run.key, r), work_done=0)
        st = _Samples.empty(workload, m, run.dtype, F)
        t = time.perf_counter()
        _algorithm1(more, st, np.arange(m), 0, F, max_ell, progress)
        per_sample = (time.perf_counter() - t) / m
        run.work_done += more.work_done
        out.append(st)
        want -= m
        r += 1
        if not st.converged.all():
            break
    return out
