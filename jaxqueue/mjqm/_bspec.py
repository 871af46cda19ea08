"""Adapter between :class:`~jaxqueue.mjqm.Workload` and the backward and pile kernels.

The kernels run the plain MJQM (one resource type, no specific servers). Inputs come from the
counter-based :func:`~jaxqueue.mjqm.draw_jobs`: job ``-n`` (``n >= 1``) of sample ``i`` is a
pure function of ``(key, i, -n)``, so doubling the horizon reuses the same past and the samples
do not depend on batching, chunking or the number of devices. The kernels walk the jobs in
chunks of ``CHUNK`` consecutive indices (chunk ``c`` holds jobs ``-(c CHUNK + 1)`` to
``-(c CHUNK + CHUNK)``), generating each chunk's inputs inside the jit.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..dist import Law
from ._inputs import job_uniforms_block, n_uniforms
from ._workload import Workload

__all__ = ["CHUNK", "check_plain", "workload_fields", "chunk_inputs"]

CHUNK = 256
"""Jobs per chunk of inputs generated inside the jit (does not change the numbers)."""


def check_plain(workload) -> Workload:
    """Refuse what the backward and pile kernels do not model.

    Raises:
        ValueError: not a ``Workload``, several resource types, or specific servers.
    """
    if not isinstance(workload, Workload):
        raise ValueError(
            f"workload must be a jaxqueue.mjqm.Workload, got {type(workload).__name__}"
        )
    if workload.n_types != 1 or workload.specific is not None:
        raise ValueError(
            "workload: the backward sampler and the pile estimator handle one resource type "
            "without specific servers"
        )
    return workload


def workload_fields(workload) -> tuple[int, np.ndarray, np.ndarray, tuple[Law, ...], Law | None]:
    """``(s, cores, probs, service laws, inter-arrival shape or None for Poisson)``."""
    w = check_plain(workload)
    cores = np.asarray(w.cores_array)[:, 0].astype(np.int64)
    probs = np.asarray(w.probs, dtype=float)
    return w.s, cores, probs, tuple(w.services), None if w.is_poisson else w.arrival_shape()


def _service(laws, cls, u):
    """Service times of jobs of classes ``cls`` from their uniforms ``u`` (jobs, width).

    Same-structured laws are stacked along a class axis and indexed per job under ``vmap`` (so
    laws with vector parameters, e.g. hyperexponential phases, index correctly); otherwise each
    class's transform is computed and the job's own selected.
    """
    leaves0, tree0 = jax.tree_util.tree_flatten(laws[0])
    same = all(
        jax.tree_util.tree_structure(law) == tree0
        and [np.shape(x) for x in jax.tree_util.tree_leaves(law)] == [np.shape(x) for x in leaves0]
        for law in laws
    )
    if same:
        stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *laws)
        k = int(laws[0].n_uniforms)

        def one(c, x):
            return jax.tree_util.tree_map(lambda a: a[c], stacked).from_uniforms(x[:k])

        return jax.vmap(one)(cls, u)
    out = jnp.zeros(cls.shape, u.dtype)
    for c, law in enumerate(laws):
        k = int(law.n_uniforms)
        out = jnp.where(cls == c, law.from_uniforms(u[..., :k]).astype(u.dtype), out)
    return out


def chunk_inputs(workload: Workload, key, rep, chunk, lam, dtype, *, n_extra: int = 0):
    """``(alpha, sigma, tau, extra)`` of the ``CHUNK`` jobs of chunk ``chunk``, oldest first.

    Chunk ``c`` holds jobs ``-(c CHUNK + CHUNK), ..., -(c CHUNK + 1)`` (the pile reads the
    same indices as its jobs). The uniforms are those of :func:`~jaxqueue.mjqm.draw_jobs`
    (same column layout: class, service, inter-arrival, extra), so the jobs are the ones the
    forward simulator would draw for these indices.
    """
    nu = n_uniforms(workload, n_extra)
    start = -(chunk * CHUNK + CHUNK)
    u = job_uniforms_block(key, rep, start, CHUNK, nu, dtype)
    ws = max(int(law.n_uniforms) for law in workload.services)
    arr = workload.arrival_shape()
    na = int(arr.n_uniforms)
    cdf = jnp.cumsum(jnp.asarray(workload.probs, dtype=dtype))
    cls = jnp.sum(u[:, :1] > cdf[:-1], axis=-1).astype(jnp.int32)
    alpha = jnp.asarray(workload.cores_array)[cls, 0]
    sigma = _service(workload.services, cls, u[:, 1 : 1 + ws]).astype(dtype)
    tau = (arr.from_uniforms(u[:, 1 + ws : 1 + ws + na]) / lam).astype(dtype)
    return alpha, sigma, tau, u[:, 1 + ws + na :]
