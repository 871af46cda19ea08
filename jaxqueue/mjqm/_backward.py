"""Backward sub-perfect sampling of the stationary workload (``papers/mjsre.md`` Algorithm 1).

For sample ``i`` the Loynes state ``M_ell`` is the ordered workload found by job 0 when the
system starts empty at the arrival of job ``-ell`` and is fed jobs ``-ell, ..., -1``
(eq. (4)). ``M_ell`` is non-decreasing in ``ell`` (Lemma 4.3); Algorithm 1 doubles ``ell``
until ``M_{2 ell} == M_ell`` (exact equality, reliable in float32) and returns that state, a
sub-perfect sample (a lower bound of a perfect sample that couples in finite time).

Implementation:

* inputs of job ``-n`` depend only on ``(key, i, n)`` (:mod:`._bspec`), so doubling reuses the
  same past and the samples do not depend on batching or on the number of devices;
* a host loop over doublings keeps only the samples not yet converged (``PERFORMANCE.md``:
  a batch that waits for its slowest sample does up to 12x the necessary work); the active
  samples are run in batches of sizes ``min_batch * 8^k`` (greedy, only the last one padded),
  so the number of compilations stays small and the work done stays close to the work needed;
* Remark 2 (memory splitting): ``M_{n1,0}(0) = M_{n2,0}(M_{n1,n2}(0))``: a horizon is run as
  consecutive segments of at most ``split_chunks * CHUNK`` jobs, each generating its inputs
  chunk by chunk inside the jit, so memory does not grow with ``ell``;
* at each doubling ``ell -> 2 ell`` the new past (jobs ``-2 ell .. -ell - 1``) is run from
  the empty state, then jobs ``-ell .. -1`` are replayed from there (Remark 2); once a replayed
  state empties it coincides with the previous trajectory (which lies below it, Lemma 4.1),
  so ``M_{2 ell} = M_ell`` and the batch stops as soon as all its states have emptied;
* the sample axis of each batch of 512 or more is sharded over ``jax.devices()`` (smaller
  batches run on one device: synchronising devices costs more than it saves there);
* ``ell`` is capped at ``max_ell``; samples that did not converge are reported in
  ``BackwardSamples.converged`` and ``status`` (their state is the last lower bound).

The one-job update is :func:`~jaxqueue.mjqm.mjsre_step` (eq. (2), an O(s) merge).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._sharding import batch_devices, batch_mesh, shard_batch, to_host
from ._bspec import CHUNK, check_plain, chunk_inputs
from ._guard import check_load
from ._step import mjsre_step
from ._workload import Workload

__all__ = [
    "BackwardSamples",
    "sample_backward",
    "loynes_state",
    "sample_backward_numpy",
    "STATUS_CONVERGED",
    "STATUS_UNCONVERGED",
]

STATUS_CONVERGED = 0
STATUS_UNCONVERGED = 1


_SHARD_MIN = 512
"""Smallest batch spread over several devices."""

_BLOCK = 64
"""Jobs whose inputs are drawn at once inside a chunk: a (block, samples) slab that stays in
cache (measured: 105 M sample-jobs/s with blocks of 64 against 77 M with whole chunks)."""


def _chunk(workload: Workload, W, hit, steps, key, i, c, lam, track):
    """Feed chunk ``c`` (256 jobs, oldest first) into a batch of states ``W`` (samples ``i``).

    With ``track``, ``hit`` becomes True once the state is the empty vector (all coordinates
    0) and ``steps`` counts the jobs fed before that; without it they pass through (per-step
    tracking costs as much as the update itself). The inputs are drawn in blocks of
    ``_BLOCK`` jobs in the ``(jobs, samples)`` layout the scan reads.
    """

    def step(carry, x):
        W, hit, steps = carry
        W = jax.vmap(mjsre_step)(W, *x)
        if not track:
            return (W, hit, steps), None
        steps = steps + jnp.where(hit, 0, 1).astype(steps.dtype)
        return (W, hit | (W[:, -1] == 0), steps), None

    def block(b, carry):
        alpha, sigma, tau, _ = chunk_inputs(
            workload, key, i, c, lam, carry[0].dtype, block=b, length=_BLOCK
        )
        # Materialise the block's inputs before the scan reads them (measured: ~10% faster).
        x = lax.optimization_barrier((alpha, sigma, tau))
        return lax.scan(step, carry, x)[0]

    return lax.fori_loop(0, CHUNK // _BLOCK, block, (W, hit, steps))


@functools.partial(jax.jit, static_argnames="stop_when_empty")
def _segment_batch(workload, W, hit, steps, key, ids, c_hi, n_chunks, lam, stop_when_empty):
    """Feed chunks ``c_hi - 1`` down to ``c_hi - n_chunks`` into a batch of states.

    With ``stop_when_empty`` the loop stops early once every state of the batch has emptied.
    Returns ``(W, hit, steps, chunks_run)``.
    """

    def chunk(W, h, s, i, c):
        return _chunk(workload, W, h, s, key, i, c, lam, stop_when_empty)

    def cond(carry):
        j, _, hit, _ = carry
        return (j < n_chunks) & ~(stop_when_empty & jnp.all(hit))

    def body(carry):
        j, W, hit, steps = carry
        W, hit, steps = chunk(W, hit, steps, ids, c_hi - 1 - j)
        return j + 1, W, hit, steps

    j, W, hit, steps = lax.while_loop(cond, body, (jnp.int32(0), W, hit, steps))
    return W, hit, steps, j


def _run(workload, key, ids, W, c_hi, n_chunks, lam, split_chunks, track):
    """Run ``n_chunks`` chunks from ``c_hi - 1`` down, as segments of ``split_chunks`` (Remark 2).

    ``M_{n1,0}(W) = M_{n2,0}(M_{n1,n2}(W))``: each segment starts from the state the previous
    one ended in. With ``track`` the run stops once every state has emptied (see
    :func:`sample_backward`). Returns ``(W, hit, steps, chunks_run)`` (host arrays).
    """
    B = ids.shape[0]
    hit = W[:, -1] == 0 if track else jnp.zeros(B, bool)
    steps = jnp.zeros(B, jnp.int64 if jax.config.jax_enable_x64 else jnp.int32)
    if B >= _SHARD_MIN:  # small batches cost more in device synchronisation than they gain
        W, hit, steps, ids = shard_batch(batch_mesh(batch_devices(B)), W, hit, steps, ids)
    done = 0
    while done < n_chunks:
        m = min(split_chunks, n_chunks - done)
        W, hit, steps, j = _segment_batch(
            workload,
            W,
            hit,
            steps,
            key,
            ids,
            jnp.int32(c_hi - done),
            jnp.int32(m),
            lam,
            bool(track),
        )
        done += int(j)
        if track and bool(jnp.all(hit)):
            break
    return to_host(W), to_host(hit), to_host(steps), done


def loynes_state(
    workload: Workload, key, ids, ell: int, lam, dtype, *, split_chunks: int = 1 << 12
):
    """``M_ell`` (eq. (4)) of the samples ``ids``: start empty at job ``-ell``, feed to ``-1``.

    ``ell`` must be a multiple of ``CHUNK``. The horizon is run in segments of at most
    ``split_chunks`` chunks composed by Remark 2.
    """
    ids = jnp.asarray(ids, dtype=jnp.int32)
    W = jnp.zeros((ids.shape[0], workload.s), dtype)
    return _run(workload, key, ids, W, ell // CHUNK, ell // CHUNK, lam, split_chunks, False)[0]


class BackwardSamples(eqx.Module):
    """Sub-perfect samples of the stationary ordered workload seen by an arriving job.

    Attributes:
        W: ``(n, s)`` ascending workload vectors (Palm distribution at arrivals).
        converged: ``(n,)`` whether Algorithm 1 met its stopping rule before ``max_ell``.
        ell: ``(n,)`` the horizon at which each sample stopped.
        lam: the arrival rate.
        status: ``STATUS_CONVERGED`` or ``STATUS_UNCONVERGED`` (some sample hit the cap).
        work_done: jobs processed, batch padding included.
        work_needed: jobs Algorithm 1 needs for these samples run one by one (each replay
            counted until its state empties).
        key: the key the samples were drawn with (metrics draw job 0's size from it).
    """

    W: np.ndarray
    converged: np.ndarray
    ell: np.ndarray
    lam: float
    status: int
    work_done: int
    work_needed: int
    key: jax.Array

    @property
    def n(self) -> int:
        return self.W.shape[0]

    @property
    def n_unconverged(self) -> int:
        return int(np.sum(~self.converged))

    @property
    def work_ratio(self) -> float:
        """Work done over work needed (1 means no sample waited for another)."""
        return self.work_done / max(self.work_needed, 1)


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


def sample_backward(
    workload,
    lam: float,
    n_samples: int,
    *,
    key,
    ell0: int = 1024,
    max_ell: int = 1 << 22,
    dtype=None,
    split_chunks: int = 1 << 12,
    min_batch: int = 8,
    max_batch: int = 4096,
    override: bool = False,
    progress: Callable[[int, int, int], None] | None = None,
) -> BackwardSamples:
    """Draw ``n_samples`` independent sub-perfect samples by Algorithm 1 (``mjsre.md`` 4.4).

    Args:
        workload: a ``jaxqueue.mjqm.Workload`` (servers, per-class cores, probabilities and
            service laws; Poisson arrivals unless it carries an inter-arrival law).
        lam: arrival rate; must be below the stability limit ``lambda_c``.
        n_samples: number of independent samples.
        key: PRNG key; sample ``i`` depends only on ``(key, i)``.
        ell0: initial horizon (rounded up to a multiple of ``CHUNK`` = 256 jobs).
        max_ell: cap on the horizon; samples not converged there are flagged.
        dtype: float dtype of the workload state (default: JAX's default float).
        split_chunks: longest segment per device call, in chunks (Remark 2).
        min_batch: smallest batch run (remainders are padded up to it); batches have sizes
            ``min_batch * 8^k`` up to ``max_batch`` (one compilation per size).
        max_batch: largest batch per device call.
        override: skip the stability check (``lam >= lambda_c`` gives unconverged samples).
        progress: optional callback ``(ell, n_active, n_done)`` called at each doubling.

    Returns:
        :class:`BackwardSamples`.

    Raises:
        ValueError: bad arguments, or ``lam`` at or beyond the stability limit (with the
            estimate of ``lambda_c`` and its interval) unless ``override``.
    """
    if not (isinstance(n_samples, (int, np.integer)) and n_samples >= 1):
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}")
    lam = float(lam)
    if not (math.isfinite(lam) and lam > 0):
        raise ValueError(f"lam must be finite and > 0, got {lam}")
    if ell0 < 1 or max_ell < ell0:
        raise ValueError(f"need 1 <= ell0 <= max_ell, got ell0={ell0}, max_ell={max_ell}")
    check_plain(workload)
    check_load(workload, lam, override=override)
    dtype = jnp.dtype(dtype) if dtype is not None else jnp.result_type(float)
    ell = CHUNK * max(1, -(-ell0 // CHUNK))
    n = int(n_samples)
    min_batch = max(min_batch, jax.device_count())
    M = np.zeros((n, workload.s), dtype)
    stop_ell = np.zeros(n, np.int64)
    converged = np.zeros(n, bool)
    needed = np.zeros(n, np.int64)
    active = np.arange(n)
    work_done = 0
    level = 0
    prev_ell = 0

    def batched(sel, W0, c_hi, n_chunks, track):
        """Run the samples ``active[sel]`` from states ``W0`` in batches of ladder sizes."""
        nonlocal work_done
        outs = []
        start = 0
        for p in _pieces(sel.size, min_batch, max_batch):
            real = min(p, sel.size - start)
            idx = sel[start : start + p]
            W = W0[start : start + p]
            if idx.size < p:
                idx = np.concatenate([idx, np.full(p - idx.size, idx[-1])])
                W = np.concatenate([W, np.repeat(W[-1:], p - W.shape[0], axis=0)])
            W, hit, steps, ran = _run(
                workload,
                key,
                jnp.asarray(active[idx], dtype=jnp.int32),
                jnp.asarray(W, dtype),
                c_hi,
                n_chunks,
                lam,
                split_chunks,
                track,
            )
            work_done += p * ran * CHUNK
            outs.append((np.asarray(W)[:real], hit[:real], steps[:real]))
            start += p
        return tuple(np.concatenate(x) for x in zip(*outs, strict=True))

    while active.size and ell <= max_ell:
        if progress is not None:
            progress(ell, int(active.size), int(n - active.size))
        na = active.size
        n_new, n_old = (ell - prev_ell) // CHUNK, prev_ell // CHUNK
        everyone = np.arange(na)
        # Jobs -ell .. -prev_ell - 1 from the empty state: X = M_{ell, prev_ell}(0).
        X = batched(everyone, np.zeros((na, workload.s), dtype), ell // CHUNK, n_new, False)[0]
        needed[active] += ell - prev_ell
        stop_ell[active] = ell
        if level == 0:
            M[active] = X
        else:
            # Jobs -prev_ell .. -1 replayed from X (Remark 2), in segments of 1, 1, 2, 4, ...
            # chunks. Once a replayed state empties it coincides with the previous trajectory
            # (which lies below it, Lemma 4.1): then M_ell = M_prev and that sample leaves
            # the batch, so no batch waits for samples that have already coupled.
            W = X.copy()
            hit = X[:, -1] == 0
            steps = np.zeros(na, np.int64)
            c_hi, seg = n_old, 1
            while c_hi > 0 and not hit.all():
                m = min(seg, c_hi)
                rem = np.flatnonzero(~hit)
                Wr, hr, sr = batched(rem, W[rem], c_hi, m, True)
                W[rem], hit[rem], steps[rem] = Wr, hr, steps[rem] + sr
                c_hi -= m
                seg *= 2
            needed[active] += np.where(hit, steps, prev_ell)
            same = hit | np.all(W == M[active], axis=1)
            M[active] = np.where(hit[:, None], M[active], W)
            converged[active[same]] = True
            active = active[~same]
        prev_ell = ell
        ell *= 2
        level += 1
    status = STATUS_CONVERGED if converged.all() else STATUS_UNCONVERGED
    return BackwardSamples(
        W=M,
        converged=converged,
        ell=stop_ell,
        lam=lam,
        status=status,
        work_done=int(work_done),
        work_needed=int(needed.sum()),
        key=key,
    )


# ---------------------------------------------------------------------------------------------
# Plain numpy reference (the benchmark baseline and an independent check of the JAX kernel)
# ---------------------------------------------------------------------------------------------


def _np_step(W, alpha, sigma, tau):
    """Eq. (2) by definition, with a full sort, vectorised over a batch ``W`` of shape (B, s)."""
    B, s = W.shape
    idx = np.arange(s)[None, :]
    Wa = W[np.arange(B), alpha - 1][:, None]
    S = np.maximum(W, Wa)
    S = S + sigma[:, None] * (idx < alpha[:, None])
    S = np.sort(S, axis=1) - tau[:, None]
    return np.maximum(S, 0.0)


def _np_inputs(rng, B, n, cores, probs, draw_sigma, lam):
    cls = rng.choice(len(cores), size=(n, B), p=probs)
    sigma = draw_sigma(rng, cls)
    tau = rng.exponential(1.0 / lam, size=(n, B))
    return cores[cls], sigma, tau


def sample_backward_numpy(
    s: int,
    cores,
    probs,
    draw_sigma: Callable,
    lam: float,
    n_samples: int,
    *,
    seed: int = 0,
    ell0: int = 1024,
    max_ell: int = 1 << 22,
) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 in plain numpy, as printed: a batch of samples vectorised together.

    The batch doubles ``ell`` until every sample has met the stopping rule (the paper's
    implementation, Section 7.2); the inputs of the past are stored and extended at each
    doubling (Algorithm 1, lines 6-9), and each pass restarts from the empty state at ``-ell``.
    ``draw_sigma(rng, cls)`` draws service times for an array of class indices.

    Returns:
        ``(W, ell)``: the samples ``(n, s)`` and the horizon each sample converged at.
    """
    rng = np.random.default_rng(seed)
    cores = np.asarray(cores)
    B = n_samples
    a, sg, t = _np_inputs(rng, B, ell0, cores, probs, draw_sigma, lam)
    ell = ell0
    Mmax = np.full((B, s), -np.inf)
    done = np.zeros(B, bool)
    stop = np.zeros(B, np.int64)
    while True:
        M = np.zeros((B, s))
        for j in range(ell - 1, -1, -1):
            M = _np_step(M, a[j], sg[j], t[j])
        grew = np.any(M > Mmax, axis=1)
        newly = ~grew & ~done
        stop[newly] = ell
        done |= newly
        Mmax = np.where(done[:, None], Mmax, M)
        if done.all() or 2 * ell > max_ell:
            break
        a2, sg2, t2 = _np_inputs(rng, B, ell, cores, probs, draw_sigma, lam)
        a, sg, t = (np.concatenate([x, y]) for x, y in ((a, a2), (sg, sg2), (t, t2)))
        ell *= 2
    stop[~done] = ell
    return Mmax, stop
