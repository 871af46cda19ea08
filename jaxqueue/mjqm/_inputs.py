"""The MJQM's job inputs: class, service time and inter-arrival time of job ``n``.

The uniforms come from the counter-based module :mod:`jaxqueue._random` (job ``n`` of
replication ``r`` is a pure function of ``(key, r, n)``); this module maps them to a job of
the workload (``mjsre`` Section 2: class ``c`` with probability ``p_c``, its cores, a service
time of its law, an inter-arrival time of mean ``1 / lam``).

Column layout of the uniforms of one job (``n_uniforms(workload)`` columns in all):
``[0]`` the class, ``[1 : 1 + n_service]`` the service time, then ``n_arrival`` columns for the
inter-arrival time, then ``n_extra`` columns (specific servers and random assignment, eq. (14)
and Appendix A, need ``s`` more uniforms to draw a random set of servers).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from .._random import (
    job_uniforms,
    job_uniforms_block,
    replication_key,
    uniform_rows,
    uniform_rows_each,
)
from ._workload import Workload

__all__ = [
    "JobInputs",
    "job_uniforms",
    "job_uniforms_block",
    "draw_jobs",
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


def _jobs_from_rows(workload: Workload, lam, rows, *, dtype, n_extra=0, probs=None) -> JobInputs:
    ws = _service_width(workload)
    arr = workload.arrival_shape()
    na = int(arr.n_uniforms)
    cdf = jnp.cumsum(jnp.asarray(workload.probs if probs is None else probs, dtype=dtype))
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
    workload: Workload,
    lam: Float[ArrayLike, ""],
    u: Float[Array, "... n"],
    *,
    dtype,
    n_extra=0,
    probs=None,
) -> JobInputs:
    """Map the uniforms of jobs (column layout of this module) to :class:`JobInputs`;
    ``probs`` (traced) replaces the workload's class probabilities (a class mix being
    optimised)."""
    rows = jnp.moveaxis(u, -1, 0)
    return _jobs_from_rows(workload, lam, rows, dtype=dtype, n_extra=n_extra, probs=probs)


def draw_jobs(
    workload: Workload,
    lam: Float[ArrayLike, ""],
    key: PRNGKeyArray,
    rep: Int[ArrayLike, "..."],
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
        rep: replication / sample index, or a vector of them (then every field gets a
            trailing replication axis, replications minor).
        jobs: job indices (any shape).
        dtype: float dtype of ``sigma`` and ``tau``.
        n_extra: number of extra uniforms per job to return in ``extra``.

    Returns:
        :class:`JobInputs`.
    """
    rows = uniform_rows(key, rep, jobs, n_uniforms(workload, n_extra), dtype)
    return _jobs_from_rows(workload, lam, rows, dtype=dtype, n_extra=n_extra)


def draw_jobs_each(workload: Workload, lam, keypairs, jobs, *, dtype) -> JobInputs:
    """Job ``jobs[r]`` of replication ``r`` for every ``r`` at once (``keypairs`` from
    :func:`replication_keypairs`): the same jobs as :func:`draw_jobs`, each replication at its
    own job index (the event engine, where replications advance at their own pace)."""
    rows = uniform_rows_each(keypairs, jobs, n_uniforms(workload), dtype)
    return _jobs_from_rows(workload, lam, rows, dtype=dtype)
