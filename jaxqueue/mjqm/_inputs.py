"""Counter-based job inputs: class, service time and inter-arrival time of job ``n``.

Every random number of job ``n`` of replication (or sample) ``r`` is a pure function of
``(key, r, n)``: the 32-bit words come from the Threefry-2x32 block cipher applied to the counter
pairs ``(n, c)`` under the key ``fold_in(key, r)`` (see :func:`job_uniforms`). Hence

* the results of a simulation do not depend on how the jobs are cut into chunks or on how the
  replications are spread over devices;
* a backward sampler that doubles its horizon reuses exactly the same past jobs;
* the uniforms can be produced for any set of job indices (negative indices are allowed: they
  are reduced modulo 2**32, so any window of fewer than 2**31 consecutive indices is distinct).

Column layout of the uniforms of one job (``n_uniforms(workload)`` columns in all):
``[0]`` the class, ``[1 : 1 + n_service]`` the service time, then ``n_arrival`` columns for the
inter-arrival time, then ``n_extra`` columns (for the specific-server / random-assignment
variants, which need ``s`` more uniforms to draw a random set of servers).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from ._workload import Workload

__all__ = [
    "JobInputs",
    "job_uniforms",
    "job_uniforms_block",
    "draw_jobs",
    "draw_jobs_block",
    "jobs_from_uniforms",
    "n_uniforms",
    "replication_key",
]


class JobInputs(NamedTuple):
    """Inputs of a batch of jobs (leading axes = those of ``jobs``).

    Attributes:
        cls: class index in ``[0, classes)`` (int32).
        alpha: cores asked, ``(..., T)`` int32 (``T`` resource types; includes the specific
            servers if any, see ``Workload.cores_array``).
        sigma: service time.
        tau: inter-arrival time to the next job (mean ``1 / lam``).
        extra: ``(..., n_extra)`` further uniforms (empty unless ``n_extra > 0``).
    """

    cls: Int[Array, "..."]
    alpha: Int[Array, "... T"]
    sigma: Float[Array, "..."]
    tau: Float[Array, "..."]
    extra: Float[Array, "... n_extra"]


def _service_width(workload: Workload) -> int:
    return max(int(law.n_uniforms) for law in workload.services)


def n_uniforms(workload: Workload, n_extra: int = 0) -> int:
    """Number of uniforms used per job: class + service + arrival + ``n_extra``."""
    return 1 + _service_width(workload) + int(workload.arrival_shape().n_uniforms) + n_extra


def replication_key(key: PRNGKeyArray, rep: Int[ArrayLike, ""]) -> PRNGKeyArray:
    """The key of replication / sample ``rep``: ``fold_in(key, rep)``."""
    return jax.random.fold_in(key, rep)


def _bits_to_uniform(bits, dtype):
    """Map uint32 words to U(0, 1] (24 bits for float32/16, 32 bits for float64)."""
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float64:
        return (bits.astype(dtype) + 1.0) * (2.0**-32)
    return ((bits >> 8).astype(dtype) + 1.0) * jnp.asarray(2.0**-24, dtype)


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
#: Threefry-2x32 rounds. 13 is the smallest count that Salmon et al. (SC'11, Table 2) found
#: Crush-resistant (passes all of TestU01's BigCrush); JAX's default of 20 adds a safety
#: margin for cryptographic-style use that a queue simulation does not need, at 50% more cost.
ROUNDS = 13


def threefry2x32(k0, k1, x0, x1, rounds: int = ROUNDS):
    """The Threefry-2x32 block cipher (Salmon et al., SC'11) in ``uint32`` ``jnp`` operations.

    With ``rounds=20`` it is bitwise the same as ``jax.random``'s ``threefry2x32`` primitive;
    the inputs use :data:`ROUNDS` = 13, the Crush-resistant count of the paper, which cut the
    forward scan's cost by about 17% (``benchmarks/bench_mjqm_forward.py``: 46 -> 55 M
    sample-jobs/s on 2 cores). Unrolled into plain elementwise operations: the primitive's
    XLA:CPU lowering is a rolled loop, about 3x slower per word in chunked input generation.

    Args:
        k0, k1: the two key words (uint32 scalars or broadcastable arrays).
        x0, x1: the two counter words (uint32, same shape).
        rounds: number of rounds (13 by default; 20 reproduces ``jax.random``).

    Returns:
        The two cipher words ``(y0, y1)``.
    """
    k0, k1, x0, x1 = (jnp.asarray(v, jnp.uint32) for v in (k0, k1, x0, x1))
    ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(0x1BD11BDA))
    x0 = x0 + ks[0]
    x1 = x1 + ks[1]
    for r in range(rounds):
        rot = _ROTATIONS[(r // 4) % 2][r % 4]
        x0 = x0 + x1
        x1 = (x1 << jnp.uint32(rot)) | (x1 >> jnp.uint32(32 - rot))
        x1 = x1 ^ x0
        if r % 4 == 3:
            i = r // 4 + 1
            x0 = x0 + ks[i % 3]
            x1 = x1 + ks[(i + 1) % 3] + jnp.uint32(i)
    return x0, x1


def _rep_keypair(key, rep):
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        kd = jax.random.key_data(replication_key(key, rep))
    else:
        kd = jax.random.key_data(replication_key(jax.random.wrap_key_data(key), rep))
    kd = kd.reshape(-1)[-2:].astype(jnp.uint32)
    return kd[0], kd[1]


def _uniform_rows(key, rep, jobs, n, dtype):
    """The uniforms of :func:`job_uniforms` as ``n`` rows, ``(n,) + jobs.shape``.

    ``rep`` may be a vector of replications: the rows then have shape
    ``(n,) + jobs.shape + rep.shape`` (replications minor, the layout of the forward scan).
    The cipher runs once per counter column ``c < m`` inside a loop (``lax.map``), so each
    word is computed once and stored; consumers read contiguous rows (the loop boundary stops
    XLA from duplicating the cipher into every consumer of its words).
    """
    rep = jnp.asarray(rep)
    k0, k1 = jnp.vectorize(_rep_keypair, excluded={0})(key, rep)
    m = (n + 1) // 2
    jobs = jnp.asarray(jobs).astype(jnp.int32)
    shape = (*jobs.shape, *rep.shape)
    x0 = jnp.broadcast_to(jobs.astype(jnp.uint32).reshape(*jobs.shape, *(1,) * rep.ndim), shape)
    if n == 0:
        return jnp.zeros((0, *shape), dtype)

    def words(c):
        return threefry2x32(k0, k1, x0, jnp.broadcast_to(c, shape))

    y0, y1 = jax.lax.map(words, jnp.arange(m, dtype=jnp.uint32))
    bits = jnp.concatenate([y0, y1], axis=0)[:n]
    return _bits_to_uniform(bits, dtype)


def job_uniforms(
    key: PRNGKeyArray,
    rep: Int[ArrayLike, ""],
    jobs: Int[ArrayLike, "..."],
    n: int,
    dtype=jnp.float32,
) -> Float[Array, "... n"]:
    """``n`` independent U(0, 1] variables per job, a pure function of ``(key, rep, job)``.

    With ``m = ceil(n / 2)``, the cipher ``Threefry2x32`` (:func:`threefry2x32`,
    :data:`ROUNDS` rounds) keyed by ``fold_in(key, rep)`` maps the counter pairs ``(job, c)``,
    ``c < m``, to words ``(y0_c, y1_c)``; the uniforms of the job are built from
    ``(y0_0, ..., y0_{m-1}, y1_0, ...)[:n]``.

    Args:
        key: a typed or raw PRNG key.
        rep: replication / sample index (traced int).
        jobs: job indices, any shape (int; negative allowed, modulo 2**32).
        n: number of uniforms per job (static).
        dtype: float dtype of the result.

    Returns:
        ``jobs.shape + (n,)`` uniforms in (0, 1].
    """
    return jnp.moveaxis(_uniform_rows(key, rep, jobs, n, dtype), 0, -1)


def job_uniforms_block(
    key: PRNGKeyArray,
    rep: Int[ArrayLike, ""],
    start: Int[ArrayLike, ""],
    length: int,
    n: int,
    dtype=jnp.float32,
) -> Float[Array, "length n"]:
    """:func:`job_uniforms` for the jobs ``start, ..., start + length - 1`` (``length`` static)."""
    jobs = jnp.asarray(start, jnp.int32) + jnp.arange(length, dtype=jnp.int32)
    return job_uniforms(key, rep, jobs, n, dtype)


def _stack_laws(laws):
    """Stack same-structured laws into one law with a leading class axis, else None."""
    leaves0, tree0 = jax.tree_util.tree_flatten(laws[0])
    shapes0 = [np.shape(x) for x in leaves0]
    for law in laws[1:]:
        leaves, tree = jax.tree_util.tree_flatten(law)
        if tree != tree0 or [np.shape(x) for x in leaves] != shapes0:
            return None
    return jax.tree_util.tree_map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *laws)


def pick_by_class(table, cls):
    """``table[cls]`` for a small static table: a chain of selects (vectorises better than a
    gather inside vmapped scans), a gather for more than 8 classes."""
    table = jnp.asarray(table)
    if table.shape[0] > 8:
        return table[cls]
    c = cls.reshape(cls.shape + (1,) * (table.ndim - 1))
    out = jnp.broadcast_to(table[0], cls.shape + table.shape[1:])
    for k in range(1, table.shape[0]):
        out = jnp.where(c == k, table[k], out)
    return out


def _cols(rows, shape, dtype):
    """``(k, *shape)`` rows (an array or a list of arrays) to the ``(*shape, k)`` layout of
    ``Law.from_uniforms`` (free for k = 1)."""
    if len(rows) == 1:
        return rows[0][..., None]
    if len(rows) == 0:
        return jnp.zeros((*shape, 0), dtype)
    if isinstance(rows, (list, tuple)):
        return jnp.stack(rows, axis=-1)
    return jnp.moveaxis(rows, 0, -1)


def _service_rows(workload: Workload, cls, rows, dtype):
    laws = workload.services
    stacked = _stack_laws(laws)
    if stacked is not None:
        flat = cls.reshape(-1)
        law_c = jax.tree_util.tree_map(lambda x: pick_by_class(x, flat), stacked)
        k = int(laws[0].n_uniforms)
        uk = _cols([r.reshape(flat.shape[0]) for r in rows[:k]], flat.shape, dtype)
        out = jax.vmap(lambda law, v: law.from_uniforms(v))(law_c, uk)
        return out.reshape(cls.shape).astype(dtype)
    out = jnp.zeros(cls.shape, dtype)
    for c, law in enumerate(laws):
        k = int(law.n_uniforms)
        out = jnp.where(
            cls == c, law.from_uniforms(_cols(rows[:k], cls.shape, dtype)).astype(dtype), out
        )
    return out


def service_from_uniforms(workload: Workload, cls, u, dtype):
    """Service times of jobs of class ``cls`` from their service uniforms ``u`` (..., width).

    Laws of the same type and parameter shapes (the usual case) are stacked and indexed by
    the class, costing one transform per job; otherwise every class's transform is computed
    and the right one selected.
    """
    return _service_rows(workload, cls, jnp.moveaxis(u, -1, 0), dtype)


def _jobs_from_rows(workload: Workload, lam, rows, *, dtype, n_extra=0) -> JobInputs:
    ws = _service_width(workload)
    arr = workload.arrival_shape()
    na = int(arr.n_uniforms)
    cdf = jnp.cumsum(jnp.asarray(workload.probs, dtype=dtype))
    cls = jnp.zeros(rows[0].shape, jnp.int32)
    for i in range(cdf.shape[0] - 1):
        t = cdf[i]
        cls = cls + (rows[0] > t).astype(jnp.int32)
    alpha = pick_by_class(workload.cores_array, cls)
    sigma = _service_rows(workload, cls, rows[1 : 1 + ws], dtype)
    unit = arr.from_uniforms(_cols(rows[1 + ws : 1 + ws + na], cls.shape, dtype)).astype(dtype)
    tau = unit / jnp.asarray(lam, dtype)
    extra = rows[1 + ws + na :]
    if isinstance(rows, (list, tuple)):
        extra = jnp.stack(extra, axis=-1) if extra else jnp.zeros((*cls.shape, 0), dtype)
    else:
        extra = jnp.moveaxis(extra, 0, -1)
    return JobInputs(cls, alpha, sigma, tau, extra)


def jobs_from_uniforms(
    workload: Workload, lam: Float[ArrayLike, ""], u: Float[Array, "... n"], *, dtype, n_extra=0
) -> JobInputs:
    """Map the uniforms of jobs (column layout of this module) to :class:`JobInputs`."""
    return _jobs_from_rows(workload, lam, jnp.moveaxis(u, -1, 0), dtype=dtype, n_extra=n_extra)


def draw_jobs(
    workload: Workload,
    lam: Float[ArrayLike, ""],
    key: PRNGKeyArray,
    rep: Int[ArrayLike, ""],
    jobs: Int[ArrayLike, "..."],
    *,
    dtype=jnp.float32,
    n_extra: int = 0,
) -> JobInputs:
    """Class, cores, service time and inter-arrival time of the given jobs of replication ``rep``.

    Deterministic in ``(key, rep, job)`` only; ``tau`` is the inter-arrival law (shape of
    ``workload.arrival``) scaled to mean ``1 / lam``, so it is differentiable in ``lam``.

    Args:
        workload: the model.
        lam: arrival rate (traced scalar).
        key: PRNG key shared by all replications.
        rep: replication / sample index.
        jobs: job indices (any shape).
        dtype: float dtype of ``sigma`` and ``tau``.
        n_extra: number of extra uniforms per job to return in ``extra``.

    Returns:
        :class:`JobInputs`.
    """
    rows = _uniform_rows(key, rep, jobs, n_uniforms(workload, n_extra), dtype)
    return _jobs_from_rows(workload, lam, rows, dtype=dtype, n_extra=n_extra)


def draw_jobs_block(
    workload: Workload,
    lam: Float[ArrayLike, ""],
    key: PRNGKeyArray,
    rep: Int[ArrayLike, ""],
    start: Int[ArrayLike, ""],
    length: int,
    *,
    dtype=jnp.float32,
    n_extra: int = 0,
) -> JobInputs:
    """:func:`draw_jobs` for the jobs ``start .. start + length - 1`` (``length`` static)."""
    jobs = jnp.asarray(start, jnp.int32) + jnp.arange(length, dtype=jnp.int32)
    rows = _uniform_rows(key, rep, jobs, n_uniforms(workload, n_extra), dtype)
    return _jobs_from_rows(workload, lam, rows, dtype=dtype, n_extra=n_extra)


def draw_jobs_block_reps(workload, lam, key, reps, start, length, *, dtype, n_extra=0):
    """:func:`draw_jobs_block` for a vector of replications at once, replications minor:
    fields of shape ``(length, R, ...)`` (the layout the batched forward scan reads)."""
    jobs = jnp.asarray(start, jnp.int32) + jnp.arange(length, dtype=jnp.int32)
    rows = _uniform_rows(key, reps, jobs, n_uniforms(workload, n_extra), dtype)
    return _jobs_from_rows(workload, lam, rows, dtype=dtype, n_extra=n_extra)


def replication_keypairs(key: PRNGKeyArray, reps: Int[ArrayLike, " R"]):
    """The cipher keys ``(k0, k1)`` of replications ``reps``, for :func:`draw_jobs_each`."""
    return jnp.vectorize(_rep_keypair, excluded={0})(key, jnp.asarray(reps))


def draw_jobs_each(workload: Workload, lam, keypairs, jobs, *, dtype) -> JobInputs:
    """Job ``jobs[r]`` of replication ``r`` for every ``r`` at once (``keypairs`` from
    :func:`replication_keypairs`): the same jobs as :func:`draw_jobs`, each replication at its
    own job index (the event engine, where replications advance at their own pace)."""
    k0, k1 = keypairs
    n = n_uniforms(workload)
    x0 = jnp.asarray(jobs).astype(jnp.uint32)
    words = [threefry2x32(k0, k1, x0, jnp.full_like(x0, c)) for c in range((n + 1) // 2)]
    # the uniforms as a list, not a stacked array: inside a loop body XLA:CPU then fuses each
    # field with the words it reads (a stack fused into its consumers cost 30x the cipher in
    # the forward scan)
    bits = ([w[0] for w in words] + [w[1] for w in words])[:n]
    rows = [_bits_to_uniform(b, dtype) for b in bits]
    return _jobs_from_rows(workload, lam, rows, dtype=dtype)
