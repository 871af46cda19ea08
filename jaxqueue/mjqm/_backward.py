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
hit the per-sample cap ``max_ell``, ``biased`` when the bias test still failed where the batch
could not double any more (``4 F > max_ell`` or the work budget ``max_work``), else ``ok``.

4. **Time budget** (``max_seconds``): the bias control runs on a pilot of ``_PILOT`` samples;
   then further samples are drawn directly at its batch horizon ``F`` (Algorithm 1 started at
   ``F`` gives ``X(F)``, the law of the pilot's samples) in rounds sized from the measured
   speed, until ``n_samples`` or the budget. The bias bound is the pilot's: with ``m``
   samples in all it is at most ``bias_tol sqrt(m / _PILOT)`` half-widths, and it is in the
   interval. Measured on two-class-256 at 0.7 ``lambda_c`` (2-core CPU): 2000 samples with
   the bias control took 61 s (batch horizon 65536), 10,000 more than 5 minutes.

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
  the empty state, then jobs ``-ell .. -1`` are replayed from there (Remark 2); once a replayed
  state empties it coincides with the previous trajectory (which lies below it, Lemma 4.1),
  so ``M_{2 ell} = M_ell`` and the batch stops as soon as all its states have emptied;
* the sample axis of each batch of 512 or more is sharded over ``jax.devices()`` (smaller
  batches run on one device: synchronising devices costs more than it saves there);
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

from .._sharding import batch_devices, batch_mesh, shard_batch, to_host
from ..stats import Result, Status
from ._bspec import CHUNK, check_plain, chunk_inputs, workload_fields
from ._guard import check_load
from ._policy import FCFSRecurrence
from ._stability import guard_key, lambda_c_estimate
from ._workload import Workload

__all__ = [
    "BackwardSamples",
    "BiasTest",
    "sample_backward",
    "horizon_floor",
    "loynes_state",
    "sample_backward_numpy",
]

_RARE_JOBS = 8
"""Jobs of the rarest class that the horizon floor holds on average."""

_RELAX_TIMES = 4
"""M/M/1 relaxation times that the horizon floor holds."""

_FLOOR_CAP = 1 << 16
"""Largest horizon floor (jobs); the batch test goes further when it must."""

_WORK_BUDGET = 1 << 39
"""Default ``max_work`` times ``s``: sample-jobs of the batch test (the cost of a sample-job
grows with ``s``); about 10 minutes on a 2-core CPU."""


_PILOT = 1000
"""Samples of the pilot that runs the bias control when ``sample_backward`` has a time budget;
the others are drawn at the pilot's batch horizon while the budget lasts."""

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
        W = jax.vmap(FCFSRecurrence((W.shape[-1],)).step)(W, *x)
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
            counted until its state empties).
        key: the key the samples were drawn with (metrics draw job 0's size from it).
        bias_bound: bound of the downward bias of the mean wait (0 without bias control).
        bias_bound_class: ``(classes,)`` the same for each class's mean wait, or ``None``.
        ell_batch: the batch horizon ``F`` of the samples ``X(F)`` (0 without bias control).
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
                f"{self.n_unconverged} of {self.n} samples hit max_ell before meeting "
                "Algorithm 1's stopping rule (lower bounds); raise max_ell"
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

    def __call__(self, ids, W0, c_hi, n_chunks, track):
        """Run samples ``ids`` from states ``W0`` through chunks ``c_hi - 1`` down
        (``n_chunks`` of them). Returns host ``(W, hit, steps)``."""
        outs = []
        start = 0
        for p in _pieces(ids.size, self.min_batch, self.max_batch):
            real = min(p, ids.size - start)
            idx = ids[start : start + p]
            W = W0[start : start + p]
            if idx.size < p:
                idx = np.concatenate([idx, np.full(p - idx.size, idx[-1])])
                W = np.concatenate([W, np.repeat(W[-1:], p - W.shape[0], axis=0)])
            W, hit, steps, ran = _run(
                self.workload,
                self.key,
                jnp.asarray(idx, dtype=jnp.int32),
                jnp.asarray(W, self.dtype),
                c_hi,
                n_chunks,
                self.lam,
                self.split_chunks,
                track,
            )
            self.work_done += p * ran * CHUNK
            outs.append((np.asarray(W)[:real], hit[:real], steps[:real]))
            start += p
        return tuple(np.concatenate(x) for x in zip(*outs, strict=True))


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
    X = run(active, empty, ell // CHUNK, (ell - prev_ell) // CHUNK, False)[0]
    st.needed[active] += ell - prev_ell
    st.stop_ell[active] = ell
    if prev_ell == 0:
        st.M[active] = X
        return active
    # Jobs -prev_ell .. -1 replayed from X (Remark 2), in segments of 1, 1, 2, 4, ... chunks.
    # Once a replayed state empties it coincides with the previous trajectory (which lies
    # below it, Lemma 4.1): then M_ell = M_prev and that sample leaves the batch, so no batch
    # waits for samples that have already coupled.
    W = X.copy()
    hit = X[:, -1] == 0
    steps = np.zeros(na, np.int64)
    c_hi, seg = prev_ell // CHUNK, 1
    while c_hi > 0 and not hit.all():
        m = min(seg, c_hi)
        rem = np.flatnonzero(~hit)
        Wr, hr, sr = run(active[rem], W[rem], c_hi, m, True)
        W[rem], hit[rem], steps[rem] = Wr, hr, steps[rem] + sr
        c_hi -= m
        seg *= 2
    st.needed[active] += np.where(hit, steps, prev_ell)
    same = hit | np.all(W == st.M[active], axis=1)
    new = np.where(hit[:, None], st.M[active], W)
    st.record(ell, active, st.M[active], new)
    st.M[active] = new
    st.converged[active[same]] = True
    return active[~same]


def _algorithm1(run, st, active, prev_ell, ell, max_ell, progress) -> None:
    """Algorithm 1 (``mjsre`` 4.4) for the samples ``active`` from horizon ``ell``.

    ``st.M[active]`` holds ``M_prev_ell`` (``prev_ell = 0``: start from scratch). Doubles
    until every sample met ``M_{2 ell} == M_ell`` or ``ell`` passed ``max_ell``.
    """
    n = st.M.shape[0]
    st.converged[active] = False
    while active.size and ell <= max_ell:
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


def horizon_floor(workload: Workload, lam: float, key) -> int:
    """The first horizon of :func:`sample_backward` by default (module docstring, 3).

    The larger of ``8 / p_min`` jobs and 4 M/M/1 relaxation times at ``rho = lam /
    lambda_c``, rounded up to ``CHUNK * 2^k``, capped at ``2^16``. ``lambda_c`` comes from
    ``lambda_c_estimate`` (exact for exponential services, else pile growth with 2^14 jobs per
    pile drawn with ``guard_key(key)``, as the load guard's); it is only computed when the
    upper bound ``rho <= lam E[sigma]`` (``1 / E[sigma]`` is a lower bound
    of ``lambda_c``) does not already put the relaxation term below the rare-class term.
    """
    _, _, probs, laws, _ = workload_fields(workload)
    jobs = _RARE_JOBS / float(np.min(probs))
    rho_up = float(lam) * float(np.sum(probs * np.array([float(x.mean()) for x in laws])))
    if jobs < _FLOOR_CAP and not (rho_up < 1 and _relaxation_jobs(rho_up) <= jobs):
        lc = lambda_c_estimate(workload, key=guard_key(key), max_jobs=1 << 14).lambda_c
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
    bound = np.maximum(mean + z * se, rare) * factor
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
    )


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
        min_batch: smallest batch run (remainders are padded up to it); batches have sizes
            ``min_batch * 8^k`` up to ``max_batch`` (one compilation per size).
        max_batch: largest batch per device call; default :func:`_cache_batch` (the batch's
            workload states fit in a core's cache: two-class-256 in float32, 1.5x faster with
            batches of 64 than of 4096).
        override: skip the stability check (``lam >= lambda_c`` gives unconverged samples).
        progress: optional callback ``(ell, n_active, n_done)`` called at each doubling.
        bias_control: run the batch-level bias test (False: Algorithm 1 alone, as printed).
        bias_tol: the test passes when the bias bound is at most this fraction of the
            half-width of the mean-wait interval.
        level: confidence level of the test (its bound and the half-width).
        max_work: budget of sample-jobs (``work_done``) for the batch doublings; default
            ``2^39 / s``. A test still failing there gives ``biased``.
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
    check_load(workload, lam, key=key, override=override)
    dtype = jnp.dtype(dtype) if dtype is not None else jnp.result_type(float)
    if ell0 is None:
        ell0 = min(horizon_floor(workload, lam, key), max(max_ell // 2, 1))
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
    _algorithm1(run, st, np.arange(pilot), 0, ell, max_ell, progress)
    tests, passed = [], True
    if bias_control and pilot >= 2:
        budget = max_work if max_work is not None else _WORK_BUDGET // workload.s
        ell, tests, passed = _control_bias(
            run, st, ell, max_ell, budget, level, bias_tol, progress, on_test
        )
    parts = [st]
    if pilot < n and st.converged.all() and passed:
        parts += _more_samples(run, workload, ell, n - pilot, max_ell, t0 + max_seconds, progress)
    st = _Samples.concat(parts)
    if not st.converged.all():
        status = Status.unconverged
    else:  # without the batch test (or with one sample) the bias is not controlled
        status = Status.ok if passed and tests else Status.biased
    bound, bound_class = (tests[-1].bound, tests[-1].bound_class) if tests else (0.0, None)
    res = BackwardSamples(
        W=st.M,
        converged=st.converged,
        ell=st.stop_ell,
        lam=lam,
        status=status,
        work_done=int(run.work_done),
        work_needed=int(st.needed.sum()),
        key=key,
        bias_bound=float(bound),
        bias_bound_class=bound_class,
        ell_batch=int(ell) if bias_control else 0,
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
