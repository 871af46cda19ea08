"""Adapter between :class:`~jaxqueue.mjqm.Workload` and the backward and pile kernels.

The kernels run the plain MJQM (one resource type, no specific servers). Inputs come from the
counter-based ``_inputs.draw_jobs``: job ``-n`` (``n >= 1``) of sample ``i`` is a
pure function of ``(key, i, -n)``, so doubling the horizon reuses the same past and the samples
do not depend on batching, chunking or the number of devices. The kernels walk the jobs in
chunks of ``CHUNK`` consecutive indices (chunk ``c`` holds jobs ``-(c CHUNK + 1)`` to
``-(c CHUNK + CHUNK)``), generating each chunk's inputs inside the jit.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .._random import uniform_rows
from ..dist import Law
from ._inputs import _jobs_from_rows, n_uniforms
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


def chunk_inputs(
    workload: Workload, key, rep, chunk, lam, dtype, *, n_extra: int = 0, block=0, length=CHUNK
):
    """``(alpha, sigma, tau, extra)`` of the ``CHUNK`` jobs of chunk ``chunk``, oldest first.

    Chunk ``c`` holds jobs ``-(c CHUNK + CHUNK), ..., -(c CHUNK + 1)`` (the pile reads the
    same indices as its jobs). The uniforms are those of ``_inputs.draw_jobs``
    (same column layout: class, service, inter-arrival, extra), so the jobs are the ones the
    forward simulator would draw for these indices. ``rep`` may be a vector of samples: the
    fields then have shape ``(CHUNK, samples)`` (samples minor, the layout a scan over the
    jobs of a batch reads without transposes).

    With ``length < CHUNK`` only block ``block`` (jobs ``block * length`` to
    ``(block + 1) * length - 1`` of the chunk, oldest first) is drawn: large batches read their
    inputs in blocks that stay in cache.
    """
    nu = n_uniforms(workload, n_extra)
    start = -(chunk * CHUNK + CHUNK) + block * length
    jobs = start + jnp.arange(length, dtype=jnp.int32)
    inp = _jobs_from_rows(
        workload, lam, uniform_rows(key, rep, jobs, nu, dtype), dtype=dtype, n_extra=n_extra
    )
    return inp.alpha[..., 0], inp.sigma, inp.tau, inp.extra
