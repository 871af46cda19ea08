"""Counter-based random numbers: the one input module of every engine (``mjqm``, ``sched``).

Every random word of job (or jump) ``n`` of replication ``r`` is a pure function of
``(key, r, n)``: the Threefry-2x32 block cipher (Salmon et al., "Parallel random numbers: as
easy as 1, 2, 3", SC'11) applied to the counter pairs ``(n, c)`` under the key words of
``fold_in(key, r)``. Hence the numbers of a simulation do not depend on how its jobs are cut
into chunks or its replications spread over devices, a backward sampler that doubles its
horizon reuses the same past, and the uniforms of any set of job indices can be produced
(negative indices are reduced modulo 2**32). Derived streams (a second use of a run's key)
are named in :data:`STREAMS`; no other module writes a stream constant.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

__all__ = [
    "ROUNDS",
    "STREAMS",
    "threefry2x32",
    "stream_key",
    "replication_key",
    "keypair",
    "replication_keypairs",
    "bits_to_uniform",
    "bits_to_unit",
    "uniform_rows",
    "uniform_rows_each",
    "job_uniforms",
    "job_uniforms_block",
]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))

ROUNDS = 13
"""Threefry-2x32 rounds: the smallest count that Salmon et al. (SC'11, Table 2) found
Crush-resistant (passes all of TestU01's BigCrush); ``jax.random`` uses 20."""

STREAMS = {"palm": 0x0B5E}
"""Named derived streams: ``stream_key(key, name)`` is ``fold_in(key, STREAMS[name])``."""


def stream_key(key: PRNGKeyArray, name: str) -> PRNGKeyArray:
    """The key of the derived stream ``name`` of ``key`` (:data:`STREAMS`)."""
    return jax.random.fold_in(key, STREAMS[name])


def threefry2x32(k0, k1, x0, x1, rounds: int = ROUNDS):
    """The Threefry-2x32 block cipher (Salmon et al., SC'11) in ``uint32`` ``jnp`` operations.

    With ``rounds=20`` it is bitwise the same as ``jax.random``'s ``threefry2x32`` primitive.
    Unrolled into plain elementwise operations, which XLA fuses into the consumers of the
    words (the primitive's XLA:CPU lowering is a rolled loop).

    Args:
        k0, k1: the two key words (uint32 scalars or broadcastable arrays).
        x0, x1: the two counter words (uint32, same shape).
        rounds: number of rounds (:data:`ROUNDS` by default; 20 reproduces ``jax.random``).

    Returns:
        The two cipher words ``(y0, y1)``.
    """
    k0, k1, x0, x1 = (jnp.asarray(v, jnp.uint32) for v in (k0, k1, x0, x1))
    ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(0x1BD11BDA))  # the cipher's key-schedule parity constant
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


def replication_key(key: PRNGKeyArray, rep: Int[ArrayLike, ""]) -> PRNGKeyArray:
    """The key of replication / sample ``rep``: ``fold_in(key, rep)``."""
    return jax.random.fold_in(key, rep)


def keypair(key, i):
    """The two cipher key words ``(2,)`` uint32 of ``fold_in(key, i)`` (``key`` typed or raw)."""
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        kd = jax.random.key_data(replication_key(key, i))
    else:
        kd = jax.random.key_data(replication_key(jax.random.wrap_key_data(key), i))
    return kd.reshape(-1)[-2:].astype(jnp.uint32)


def _rep_keypair(key, rep):
    kd = keypair(key, rep)
    return kd[0], kd[1]


def replication_keypairs(key: PRNGKeyArray, reps: Int[ArrayLike, " R"]):
    """The cipher key words ``(k0, k1)`` of replications ``reps``, each ``reps.shape``."""
    return jnp.vectorize(_rep_keypair, excluded={0})(key, jnp.asarray(reps))


def bits_to_uniform(bits, dtype):
    """uint32 words to U(0, 1] (24 bits for float32 and narrower, 32 bits for float64)."""
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float64:
        return (bits.astype(dtype) + 1.0) * (2.0**-32)
    return ((bits >> 8).astype(dtype) + 1.0) * jnp.asarray(2.0**-24, dtype)


def bits_to_unit(bits, dtype):
    """uint32 words to U[0, 1) (24 bits where the mantissa is shorter than 32, so that none
    rounds to 1; else 32 bits)."""
    if jnp.finfo(dtype).nmant < 32:
        return (bits >> 8).astype(dtype) * (2.0**-24)
    return bits.astype(dtype) * (2.0**-32)


def uniform_rows(key, rep, jobs, n, dtype):
    """The ``n`` uniforms in (0, 1] of the jobs ``jobs`` of replication ``rep`` as ``n`` rows,
    ``(n,) + jobs.shape``.

    ``rep`` may be a vector of replications: the rows then have shape
    ``(n,) + jobs.shape + rep.shape`` (replications minor). With ``m = ceil(n / 2)``, the
    cipher maps the counter pairs ``(job, c)``, ``c < m``, to words ``(y0_c, y1_c)``; the
    uniforms are ``(y0_0, ..., y0_{m-1}, y1_0, ...)[:n]``. The cipher runs once per counter
    column inside a loop (``lax.map``), so each word is computed once and stored; consumers
    read contiguous rows (the loop boundary stops XLA from duplicating the cipher into every
    consumer of its words).
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
    return bits_to_uniform(bits, dtype)


def uniform_rows_each(keypairs, jobs, n, dtype) -> list:
    """The uniforms of :func:`uniform_rows` of job ``jobs[r]`` of replication ``r`` for every
    ``r`` at once (``keypairs`` from :func:`replication_keypairs`), as a list of ``n`` rows.

    A list, not a stacked array: inside a loop body XLA:CPU then fuses each row with the
    words it reads instead of recomputing the cipher in every consumer of a stack."""
    k0, k1 = keypairs
    x0 = jnp.asarray(jobs).astype(jnp.uint32)
    words = [threefry2x32(k0, k1, x0, jnp.full_like(x0, c)) for c in range((n + 1) // 2)]
    bits = ([w[0] for w in words] + [w[1] for w in words])[:n]
    return [bits_to_uniform(b, dtype) for b in bits]


def job_uniforms(
    key: PRNGKeyArray,
    rep: Int[ArrayLike, ""],
    jobs: Int[ArrayLike, "..."],
    n: int,
    dtype=jnp.float32,
) -> Float[Array, "... n"]:
    """``n`` independent U(0, 1] variables per job, a pure function of ``(key, rep, job)``
    (:func:`uniform_rows`, the rows as the last axis).

    Args:
        key: a typed or raw PRNG key.
        rep: replication / sample index (traced int).
        jobs: job indices, any shape (int; negative allowed, modulo 2**32).
        n: number of uniforms per job (static).
        dtype: float dtype of the result.

    Returns:
        ``jobs.shape + (n,)`` uniforms in (0, 1].
    """
    return jnp.moveaxis(uniform_rows(key, rep, jobs, n, dtype), 0, -1)


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
