"""The backward sampler's kernels (``mjsre`` Algorithm 1, Section 4.4): Loynes states
``M_ell`` (eq. (4)) of batches of samples, fed jobs ``-ell .. -1`` with the engine's FCFS step
(eq. (2)), and the first two horizons of every sample in one device call per device.

Inputs of job ``-n`` depend only on ``(key, i, n)`` (``_bspec.py``), so doubling a horizon
reuses the same past and the samples do not depend on batching or on the devices. A horizon
runs as consecutive segments (Remark 2: ``M_{n1,0}(0) = M_{n2,0}(M_{n1,n2}(0))``), each
drawing its inputs chunk by chunk inside the jit, so memory does not grow with ``ell``. At a
doubling the new past runs from the empty state, then the last jobs are replayed beside the
previous trajectory until the two meet at the end of a block of ``_BLOCK`` jobs (from there
on they stay equal). Batches have ladder sizes ``min_batch * 8^k`` (few compilations, little
padding); batches of ``_SHARD_MIN`` or more are sharded over ``jax.devices()``.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec

from ...._jit import jit_per_platform
from ...._sharding import BATCH, batch_devices, batch_mesh, shard_batch, to_host
from ..._bspec import CHUNK, chunk_inputs, workload_fields
from ..._workload import Workload
from ._steps import FCFSStep

_SHARD_MIN = 512
"""Smallest batch spread over several devices."""

_BLOCK = 64
"""Jobs whose inputs are drawn at once inside a chunk: a (block, samples) slab that stays in
cache."""


def _chunk(workload: Workload, W, key, i, c, lam):
    """Feed chunk ``c`` (256 jobs, oldest first) into a batch of states ``W`` (samples ``i``).

    The inputs are drawn in blocks of ``_BLOCK`` jobs in the ``(jobs, samples)`` layout the
    scan reads.
    """
    step1 = jax.vmap(FCFSStep((W.shape[-1],)).step)

    def block(b, W):
        alpha, sigma, tau, _ = chunk_inputs(
            workload, key, i, c, lam, W.dtype, block=b, length=_BLOCK
        )
        # Materialise the block's inputs once, before the scan reads them.
        x = lax.optimization_barrier((alpha, sigma, tau))
        return lax.scan(lambda W, x: (step1(W, *x), None), W, x)[0]

    return lax.fori_loop(0, CHUNK // _BLOCK, block, W)


def _segment_batch_impl(workload, W, key, ids, c_hi, n_chunks, lam):
    """Feed chunks ``c_hi - 1`` down to ``c_hi - n_chunks`` into a batch of states."""
    return lax.fori_loop(
        0, n_chunks, lambda j, W: _chunk(workload, W, key, ids, c_hi - 1 - j, lam), W
    )


_CPU_OPTIONS = {"xla_cpu_prefer_vector_width": 512}
"""XLA:CPU options of the sampler's kernels: 512-bit vectors where the CPU has them (the
same numbers). Not passed to other backends."""


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
``max_batch``; ``benchmarks/RESULTS.md``)."""

_SUB_OTHER = 4096
"""The same on other backends (a GPU wants wide batches)."""

_MEET_BLOCKS = 2
"""Blocks of ``_BLOCK`` jobs that the upper trajectory of a group runs beside the lower one in
:func:`_pair_local` before the samples whose two trajectories have not met move to
:func:`_pair_more` (most samples meet within two blocks; a group that waited for its last
sample would run many more)."""

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
    step1 = jax.vmap(FCFSStep((workload.s,)).step)

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
    the scan into a tight loop. ``steps`` counts the
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


_CACHE_BYTES = 1 << 17
"""Workload-state bytes per device that a batch of samples should not exceed: the step reads
and writes every state of the batch, memory-bound once the batch leaves the cache."""


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
