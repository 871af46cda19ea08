"""The derivative of a stationary start for :func:`~jaxqueue.mjqm.sensitivity`.

Sample ``i`` of :func:`~jaxqueue.mjqm.sample_backward` is a Loynes state ``M_ell`` (``mjsre``
eq. (4)): the workload found by job 0 when jobs ``-ell .. -1`` of ``(key, i)`` run from the
empty state. Algorithm 1 stops at the horizon ``ell`` where ``M_ell == M_{ell / 2}``, so the
sample is also the state after jobs ``-ell / 2 .. -1`` from empty. The pathwise derivative of
the sample with respect to ``lam`` and the service scales is that replay's forward-mode
derivative: the empty state does not depend on the parameters, and once the trajectory has
coupled with the stationary one (which the equality says it has) neither its value nor its
derivative depends on the start. The replay gives back the sample's value, checked against
it (:func:`start_derivative`'s ``mismatch``).

For the class logits the start's score is the classes' score of jobs ``-ell .. -1``: the
stopping horizon ``ell`` is decided by jobs ``-ell .. -1`` alone (a stopping time of the past
read backwards), so the scores of the jobs before it have mean zero given the sample.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._random import job_uniforms
from ._bspec import CHUNK
from ._inputs import jobs_from_uniforms, n_uniforms
from .engines.recurrence import run_jobs
from .policies import FCFS

__all__ = ["StartDerivative", "start_derivative"]


@jax.jit
def _replay(workload, key, theta, ids, half_chunks, n_chunks):
    """Per sample ``ids[k]``: the state after jobs ``-half_chunks[k] CHUNK .. -1`` from empty
    and its Jacobian with respect to ``theta = (lam, scale_1 .. scale_C)``; all samples run
    ``n_chunks`` chunks (oldest first), a sample's state staying empty before its horizon."""
    s, dtype, nu = workload.s, theta.dtype, n_uniforms(workload)

    def state(theta, i, h):
        lam, scale = theta[0], theta[1:]

        def chunk(j, W):
            c = n_chunks - 1 - j  # chunk c: jobs -(c + 1) CHUNK .. -c CHUNK - 1
            jobs = -(c * CHUNK + CHUNK) + jnp.arange(CHUNK, dtype=jnp.int32)
            u = job_uniforms(key, i, jobs, nu, dtype)
            inp = jobs_from_uniforms(workload, lam, u, dtype=dtype)
            inp = inp._replace(sigma=inp.sigma * scale[inp.cls])
            W_next, _ = run_jobs(workload, FCFS(), inp, W)
            return jnp.where(c < h, W_next, W)

        W = lax.fori_loop(0, n_chunks, chunk, jnp.zeros((s,), dtype))
        return W, W

    def one(i, h):
        jac, W = jax.jacfwd(state, has_aux=True)(theta, i, h)
        return W, jac

    return jax.vmap(one)(ids, half_chunks)


_GROUP = 16
"""Samples replayed together: each group runs to its own longest horizon (the samples sorted
by horizon), one compiled shape."""


def _replay_grouped(workload, key, theta, half):
    """:func:`_replay` of every sample in groups of ``_GROUP`` of similar horizons."""
    n = half.shape[0]
    order = np.argsort(half, kind="stable")
    W, dW = [None] * n, [None] * n
    for lo in range(0, n, _GROUP):
        idx = order[lo : lo + _GROUP]
        pad = np.concatenate([idx, np.full(_GROUP - idx.size, idx[-1])])
        h = half[pad]
        Wg, dWg = _replay(
            workload,
            key,
            theta,
            jnp.asarray(pad, jnp.int32),
            jnp.asarray(h, jnp.int32),
            jnp.int32(h.max()),
        )
        Wg, dWg = np.asarray(Wg), np.asarray(dWg)  # host copies: no program per slice
        for k, i in enumerate(idx):
            W[i], dW[i] = Wg[k], dWg[k]
    return np.stack(W), np.stack(dW)


@functools.partial(jax.jit, static_argnames=("dtype",))
def _past_counts(workload, key, ids, ell_chunks, n_chunks, dtype):
    """Per sample: the class counts of jobs ``-ell_chunks[k] CHUNK .. -1`` (the class uniform
    is column 0 of the job's uniforms whatever their number)."""
    cdf = jnp.cumsum(jnp.asarray(workload.probs, dtype))
    classes = jnp.arange(workload.n_classes)

    def one(i, e):
        def chunk(c, cnt):
            jobs = -(c * CHUNK + CHUNK) + jnp.arange(CHUNK, dtype=jnp.int32)
            u = job_uniforms(key, i, jobs, 1, dtype)[:, 0]
            cls = jnp.sum(u[:, None] > cdf[None, :-1], axis=1)
            add = jnp.sum(cls[:, None] == classes[None, :], axis=0, dtype=jnp.int32)
            return cnt + jnp.where(c < e, add, 0)

        return lax.fori_loop(0, n_chunks, chunk, jnp.zeros((workload.n_classes,), jnp.int32))

    return jax.vmap(one)(ids, ell_chunks)


class StartDerivative(NamedTuple):
    """:func:`start_derivative`'s result (``None`` for a part not asked for).

    Attributes:
        dW0: ``(R, s, 1 + C)`` (numpy) derivative of each sample with respect to ``(lam, scale)``.
        counts: ``(R, C)`` class counts of jobs ``-ell .. -1`` (``ell`` the sample's stopping
            horizon); jobs: ``(R,)`` their number.
        mismatch: the largest relative difference between a replayed state and its sample
            (0 up to rounding when the replay reproduces the sampler).
    """

    dW0: np.ndarray | None
    counts: np.ndarray | None
    jobs: np.ndarray
    mismatch: float


def start_derivative(workload, samples, theta, *, replay=True, scores=True) -> StartDerivative:
    """The derivative (``replay``) and the class-mix score (``scores``) of the backward
    samples ``samples`` at ``theta = (lam, scale)`` (the samples' ``lam``, scales 1).

    Raises:
        ValueError: a stopping horizon that is not a multiple of ``2 CHUNK``.
    """
    ell = np.asarray(samples.ell, np.int64)
    if np.any(ell % (2 * CHUNK)) or np.any(ell <= 0):
        raise ValueError("samples: stopping horizons must be positive multiples of 2 CHUNK")
    half = ell // (2 * CHUNK)
    ids = jnp.asarray(np.arange(ell.shape[0]), jnp.int32)
    dW, counts, mismatch = None, None, 0.0
    if replay:
        W, dW = _replay_grouped(workload, samples.key, theta, half)
        W0 = np.asarray(samples.W, np.float64)
        err = np.abs(np.asarray(W, np.float64) - W0) / (1.0 + np.abs(W0))
        mismatch = float(err.max(initial=0.0))
    if scores:
        e = jnp.asarray(2 * half, jnp.int32)
        dt = jnp.dtype(theta.dtype)
        counts = np.asarray(
            _past_counts(workload, samples.key, ids, e, jnp.int32(2 * half.max()), dt)
        )
    return StartDerivative(dW, counts, ell, mismatch)
