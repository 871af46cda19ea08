"""The measure-valued derivative of a mean metric with respect to the class logits, for
:func:`~jaxqueue.mjqm.sensitivity` (FCFS recurrence).

With ``p = softmax(logits)`` and jobs i.i.d., ``d p_i / d logit_j = p_i (delta_ij - p_j)`` and
a job's class law is the mixture ``sum_i p_i delta_i``, so (Pflug's measure-valued
differentiation; Heidergott and Vazquez-Abad, 2008)

    d eta / d logit_j = p_j (D_j - sum_i p_i D_i),
    D_i = E0[ sum_{m >= 0} (g_m^(i) - g_m) ],

``E0`` the Palm expectation at a typical job 0 of the stationary sequence and ``g^(i)`` the
path with job 0's class replaced by ``i`` (its cores, and its service time drawn under class
``i``'s law from the same uniforms; all other inputs common). The sum runs over job 0 itself
(its wait, and for the response its service time) and the later jobs until the two paths
couple: from the first job after which the workload vectors are equal they stay equal. For
the mean of class ``c``, ``eta_c = A_c / p_c`` with ``A_c = E0[g_0 1{c_0 = c}]``: ``A_c``'s
derivative is the formula with ``g_m 1{c_m = c}`` (job 0 counts in its new class), and
``d eta_c / d logit_j = (d A_c / d logit_j) / p_c - eta_c (delta_cj - p_j)``.

Each replication samples ``K`` jobs at fixed positions of its measured window (stationary
states: no choice depends on the path) and runs the ``C`` copies of each (copy ``c_0`` is the
original path) in lanes until they couple (:func:`_couple`); a sample not coupled within
``horizon`` jobs is cut and counted (:class:`LogitDerivative`'s ``cut``).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._random import job_uniforms
from ._inputs import jobs_from_uniforms, n_uniforms
from .engines.recurrence import core_groups, fcfs_rows_step, fcfs_rows_wait, run_jobs
from .policies import FCFS

__all__ = ["LogitDerivative", "logit_derivative"]

_LANES = 256
"""Samples run side by side (each lane takes the next sample when its own couples)."""

SPACING = 256
"""Fewest jobs between two samples of a replication by default: closer samples share most of
their congestion (the spacing is also at least a pilot's mean coupling time)."""


def _inputs(workload, params, u):
    lam, scale, logits = params
    inp = jobs_from_uniforms(workload, lam, u, dtype=lam.dtype, probs=jax.nn.softmax(logits))
    return inp._replace(sigma=inp.sigma * scale[inp.cls])


@functools.partial(jax.jit, static_argnames=("warm", "K", "L"))
def _states(workload, params, key, W0, *, warm, K, L):
    """Per replication (rows of ``W0``), the workload vectors found by jobs ``warm + k L``,
    ``k < K``: ``(R, K, s)``."""
    nu = n_uniforms(workload)
    dt = params[0].dtype

    def one(r, W):
        if warm:
            u = job_uniforms(key, r, jnp.arange(warm), nu, dt)
            W, _ = run_jobs(workload, FCFS(), _inputs(workload, params, u), W)

        def seg(W, k):
            u = job_uniforms(key, r, warm + k * L + jnp.arange(L), nu, dt)
            W_next, _ = run_jobs(workload, FCFS(), _inputs(workload, params, u), W)
            return W_next, W

        return lax.scan(seg, W, jnp.arange(K))[1]

    return jax.vmap(one)(jnp.arange(W0.shape[0]), W0)


@functools.partial(jax.jit, static_argnames=("R", "lanes", "horizon", "response"))
def _couple(workload, params, key, starts, reps, pos, M, *, R, lanes, horizon, response):
    """For the samples ``m < M`` (state ``starts[m]`` found by job ``pos[m]`` of replication
    ``reps[m] < R``; rows from ``M`` on are padding), per replication: the sums over its
    samples of ``D[i, c]``, the change of the sum of class ``c``'s metric over the sample's job
    and the later ones when its class is ``i`` (zero for its own class), ``(R, C, C)``; of the
    jobs run until the copies coupled (``(R,)``); and the number of samples cut at ``horizon``
    jobs (``(R,)``). Also the class probabilities ``softmax(logits)``."""
    s = starts.shape[1]
    M = jnp.asarray(M, jnp.result_type(int))
    C = workload.n_classes
    nu = n_uniforms(workload)
    dt = starts.dtype
    probs = jax.nn.softmax(params[2])
    classes = jnp.arange(C)
    rows = dict(sizes=(s,), groups=core_groups(workload))
    draw = jax.vmap(lambda r, n: job_uniforms(key, r, n, nu, dt))

    def rows_of(m):  # the start states of samples m (lanes,) as the engine's rows
        return jnp.broadcast_to(starts[m].T[:, :, None], (s, lanes, C))

    u0 = draw(reps, pos)
    owns = _inputs(workload, params, u0).cls  # each sample job's class on the original path
    mid = jnp.cumsum(probs) - probs / 2  # a class uniform inside each class's interval
    first = _inputs(
        workload, params, jnp.broadcast_to(u0[:, None], (u0.shape[0], C, nu)).at[..., 0].set(mid)
    )
    first_g = jnp.where(response, first.sigma, 0)  # the own service time in the response

    def body(carry):
        X, S, m, t, nxt, D, T, cut = carry  # X: (s, lanes, C), the engine's rows
        active = m < M
        mm = jnp.minimum(m, M - 1)
        inp = _inputs(workload, params, draw(reps[mm], pos[mm] + t))
        start = (t == 0)[:, None]
        sigma = jnp.where(start, first.sigma[mm], inp.sigma[:, None])
        cls = jnp.where(start, classes[None, :], inp.cls[:, None])
        tau = jnp.broadcast_to(inp.tau[:, None], sigma.shape)
        wait = fcfs_rows_wait(X, cls, **rows)
        X = fcfs_rows_step(X, wait, cls, sigma, tau, **rows)[0]
        g = wait + jnp.where(start, first_g[mm], 0)
        S = S + jnp.where(cls[:, :, None] == classes, g[:, :, None], 0)
        t = t + 1
        o = owns[mm][None, :, None]
        coupled = jnp.all(X == jnp.take_along_axis(X, o, axis=2), axis=(0, 2))
        done = active & (coupled | (t >= horizon))
        r = jnp.where(done, reps[mm], R)  # out of bounds: dropped
        D = D.at[r].add(S - jnp.take_along_axis(S, o[0, :, :, None], axis=1), mode="drop")
        T = T.at[r].add(t, mode="drop")
        cut = cut.at[r].add(~coupled, mode="drop")
        m = jnp.where(done, jnp.minimum(nxt + jnp.cumsum(done) - 1, M), m)
        nxt = nxt + jnp.sum(done)
        X = jnp.where(done[None, :, None], rows_of(jnp.minimum(m, M - 1)), X)
        S = jnp.where(done[:, None, None], 0, S)
        t = jnp.where(done, 0, t)
        return X, S, m, t, nxt, D, T, cut

    m0 = jnp.arange(lanes)
    carry = (
        rows_of(jnp.minimum(m0, M - 1)),
        jnp.zeros((lanes, C, C), dt),
        jnp.where(m0 < M, m0, M),
        jnp.zeros((lanes,), jnp.int32),
        jnp.minimum(lanes, M),
        jnp.zeros((R, C, C), dt),
        jnp.zeros((R,), jnp.int32),
        jnp.zeros((R,), jnp.int32),
    )
    out = lax.while_loop(lambda c: jnp.any(c[2] < M), body, carry)
    return out[5], out[6], out[7], probs


class LogitDerivative(NamedTuple):
    """:func:`logit_derivative`'s result.

    Attributes:
        overall: ``(R, C)`` per replication, the derivative of the metric with respect to
            each logit.
        per_class: ``(R, C, C)`` [metric class, logit] of the per-class metrics.
        samples: sampled jobs per replication. cut: samples not coupled within the horizon.
    """

    overall: np.ndarray
    per_class: np.ndarray
    samples: int
    cut: int


def logit_derivative(
    workload, params, key, W0, yc, *, n_jobs, warm, samples, horizon, response
) -> LogitDerivative:
    """The measure-valued derivatives (module docstring) of the replications started at
    ``W0`` (jobs ``(key, r, n)``), their per-class metrics ``yc`` ``(R, C)``, from ``samples``
    jobs each spread over jobs ``warm .. n_jobs - 1``; ``None``: one per ``SPACING`` jobs or
    per mean coupling time of a pilot (each replication's job ``warm``), the longer."""
    R = W0.shape[0]
    # the pilot and the run share one compiled shape: room for the most samples either takes
    most = int(min(samples, n_jobs - warm)) if samples is not None else (n_jobs - warm) // SPACING
    room = R * max(1, most)
    sizes = dict(R=R, horizon=int(horizon), response=response)

    def run(K, L, lanes):
        if K == 1 and warm == 0:  # the states found by job 0 are the starts
            starts = np.asarray(W0)
        else:
            starts = np.asarray(_states(workload, params, key, W0, warm=warm, K=K, L=L))
        starts = starts.reshape(R * K, -1)
        reps = np.repeat(np.arange(R, dtype=np.int32), K)
        pos = np.tile(warm + L * np.arange(K, dtype=np.int32), R)
        pad = ((0, room - R * K),)
        starts, reps, pos = (np.pad(x, pad + ((0, 0),) * (x.ndim - 1)) for x in (starts, reps, pos))
        return _couple(workload, params, key, starts, reps, pos, R * K, lanes=lanes, **sizes)

    if samples is None:
        pilot = float(np.asarray(run(1, 1, min(_LANES, room))[1]).sum()) / R
        samples = max(1, (n_jobs - warm) // max(SPACING, math.ceil(pilot)))
    K = int(min(samples, n_jobs - warm))
    D, _, cut, p = run(K, (n_jobs - warm) // K, min(_LANES, R * K))
    p = np.asarray(p, np.float64)
    D = np.asarray(D, np.float64) / K  # [r, copy i, class c]: the mean over the samples
    A = p[:, None] * (D - np.einsum("i,ric->rc", p, D)[:, None, :])  # [r, logit j, class c]
    overall = A.sum(axis=2)
    eye = np.eye(p.size)
    per = (
        A.swapaxes(1, 2) / p[None, :, None]
        - np.asarray(yc, np.float64)[:, :, None] * (eye - p[None, :])[None]
    )
    return LogitDerivative(overall, per, K, int(np.sum(cut)))
