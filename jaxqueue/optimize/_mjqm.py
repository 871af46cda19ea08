"""Differentiable estimators for the multiserver-job queue (MJQM, ``mjsre``).

The recurrence engine of :mod:`jaxqueue.mjqm` (eq. (2), ``engines.recurrence.run_jobs``) fed
the jobs of the counter-based uniforms of :func:`jaxqueue.mjqm.job_uniforms`
(:func:`jaxqueue.mjqm.jobs_from_uniforms`), so that every input is a smooth function of the
continuous parameters at fixed uniforms (common random numbers):

* ``tau_n = A(u_n) / lam`` (arrival rate ``lam``),
* ``sigma_n = scale * B_c(u_n) / speed`` (service-time scale, server speed),
* ``c_n = F_p^{-1}(u_n)`` with ``p = softmax(logits)`` (class mix).

Estimators:

* **pathwise (IPA)** for ``lam``, ``scale``, ``speed``: the waiting times are compositions of
  ``max``, ``min`` and sums of the inputs, hence Lipschitz in the parameters; the
  derivative of a finite-horizon average is unbiased (dominated convergence) and is computed by
  forward-mode autodiff through the scan;
* **score function (likelihood ratio)** for the class logits: the class draws are the only
  inputs whose law depends on ``p``, so ``d E[f] / d logits = E[(f - b) sum_n (e_{c_n} - p)]``
  with a leave-one-out baseline ``b`` (unbiased).

Both are validated in the tests against central finite differences with common random numbers
(:func:`finite_difference`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxqueue.mjqm import Workload, job_uniforms, jobs_from_uniforms, n_uniforms
from jaxqueue.mjqm.engines.recurrence import run_jobs
from jaxqueue.mjqm.policies import FCFS
from jaxqueue.scenarios import get as get_scenario
from jaxqueue.stats import mean_ci

__all__ = [
    "MJQMSampler",
    "five_class_workload",
]


def five_class_workload() -> Workload:
    """The five-class MJQM of ``mjsre`` Section 8.2 / Table 2 with exponential service
    times (``jaxqueue.scenarios.get("five-class-exp")``)."""
    return get_scenario("five-class-exp")


class MJQMSampler:
    """Common-random-number simulator of the MJQM, differentiable in its parameters.

    Parameters (a dict): ``lam`` (arrival rate), ``scale`` (service-time multiplier),
    ``speed`` (server speed), ``logits`` (class mix, ``p = softmax(logits)``). Missing entries
    take their defaults (``scale = speed = 1``, ``logits = log(workload.probs)``).

    Each of ``n_replications`` replications starts empty and runs ``n_jobs`` jobs; the first
    ``n_warmup`` are left out of the statistics. Replication ``r`` uses the uniforms
    ``job_uniforms(key, r, n)`` whatever the parameters (common random numbers).

    Args:
        workload: a single-resource :class:`jaxqueue.mjqm.Workload` with Poisson arrivals or
            any arrival law with a uniform transform.
        key: PRNG key.
        n_jobs, n_replications, n_warmup: sizes (static).
        dtype: float dtype of the simulation.

    Raises:
        ValueError: several resource types, specific servers, or bad sizes.
    """

    def __init__(
        self,
        workload: Workload,
        *,
        key,
        n_jobs: int = 4000,
        n_replications: int = 64,
        n_warmup: int | None = None,
        dtype=jnp.float64,
    ):
        if workload.n_types != 1 or workload.specific is not None:
            raise ValueError("workload: one resource type without specific servers is supported")
        n_warmup = n_jobs // 5 if n_warmup is None else int(n_warmup)
        if not (n_jobs >= 2 and n_replications >= 2 and 0 <= n_warmup < n_jobs):
            raise ValueError("sizes: need n_jobs >= 2, n_replications >= 2, 0 <= n_warmup < n_jobs")
        self.workload = workload
        self.key = key
        self.n_jobs = int(n_jobs)
        self.n_replications = int(n_replications)
        self.n_warmup = n_warmup
        self.dtype = jnp.dtype(dtype)
        self.cores = jnp.asarray(np.asarray(workload.cores_array)[:, 0])
        self.mean_service = jnp.asarray(workload.mean_service(), self.dtype)
        self._waits_jit = jax.jit(self._waits)
        self._metrics_jit = jax.jit(self._metrics, static_argnames=("quantile",))

    def full_params(self, params: dict) -> dict:
        """Fill in defaults for missing parameters."""
        out = {
            "scale": jnp.ones((), self.dtype),
            "speed": jnp.ones((), self.dtype),
            "logits": jnp.log(jnp.asarray(self.workload.probs, self.dtype)),
        }
        out.update({k: jnp.asarray(v, self.dtype) for k, v in params.items()})
        return out

    def _inputs(self, params, rep):
        """The jobs of replication ``rep`` at ``params``: the class mix ``softmax(logits)``
        (its draws held fixed: the score function differentiates it), service times scaled
        by ``scale / speed``, arrivals at rate ``lam``."""
        wl = self.workload
        u = job_uniforms(self.key, rep, jnp.arange(self.n_jobs), n_uniforms(wl), self.dtype)
        p = jax.lax.stop_gradient(jax.nn.softmax(params["logits"]))
        inp = jobs_from_uniforms(wl, params["lam"], u, dtype=self.dtype, probs=p)
        return inp._replace(sigma=inp.sigma * params["scale"] / params["speed"])

    def waits(self, params: dict):
        """Waiting times ``(replications, n_jobs)`` and classes of every job (full horizon)."""
        return self._waits_jit(params)

    def _waits(self, params: dict):
        params = self.full_params(params)

        def one(rep):
            inp = self._inputs(params, rep)
            return run_jobs(self.workload, FCFS(), inp)[1], inp.cls

        return jax.vmap(one)(jnp.arange(self.n_replications))

    def margin(self, params: dict):
        """``1 - lam E[alpha sigma] / s``: the no-HOL (ideal) load margin, a necessary
        stability condition (``mjsre`` Section 7.3: ``lambda_ideal``)."""
        params = self.full_params(params)
        p = jax.nn.softmax(params["logits"])
        work = jnp.sum(p * self.cores * self.mean_service) * params["scale"] / params["speed"]
        return 1.0 - params["lam"] * work / self.workload.s

    def metrics(self, params: dict, *, quantile: float = 0.9) -> dict:
        """Sample-average metrics at ``params`` (differentiable in lam, scale, speed).

        Returns:
            dict with ``W`` (mean waiting per class, pooled ratio estimator), ``W_p90``
            (empirical ``quantile`` of the waiting time per class), ``W_all`` (mean over all
            jobs), ``W_rep`` (per-replication mean over all jobs) and ``margin``.
        """
        return self._metrics_jit(params, quantile=quantile)

    def _metrics(self, params: dict, quantile: float):
        wf, cf = self.waits(params)
        w_rep = wf[:, self.n_warmup :].mean(axis=1)
        w = wf[:, self.n_warmup :].reshape(-1)
        cls = cf[:, self.n_warmup :].reshape(-1)
        C = self.workload.n_classes
        onehot = cls[None, :] == jnp.arange(C)[:, None]  # (C, N)
        cnt = jnp.sum(onehot, axis=1)
        W = jnp.sum(jnp.where(onehot, w[None, :], 0.0), axis=1) / jnp.maximum(cnt, 1)
        # one sort of all waits; the k-th smallest wait of class c sits at the first position
        # where the running count of class-c jobs in sorted order exceeds k
        order = jnp.argsort(w)
        ws = w[order]
        cum = jnp.cumsum(onehot[:, order], axis=1)  # (C, N)
        pos = quantile * (cnt - 1).astype(self.dtype)
        lo = jnp.floor(pos).astype(cum.dtype)
        frac = pos - lo
        hi = jnp.minimum(lo + 1, jnp.maximum(cnt - 1, 0))
        first = jax.vmap(lambda c, k: jnp.searchsorted(c, k + 1))
        n = ws.shape[0] - 1
        q_lo = ws[jnp.minimum(first(cum, lo), n)]
        q_hi = ws[jnp.minimum(first(cum, hi), n)]
        q = q_lo + frac * (q_hi - q_lo)
        return {
            "W": W,
            "W_p90": q,
            "W_all": jnp.mean(w),
            "W_rep": w_rep,
            "count": cnt,
            "margin": self.margin(params),
        }

    def _f_rep(self, params):
        """Per-replication objective: mean waiting over the measured jobs."""
        return self.waits(params)[0][:, self.n_warmup :].mean(axis=1)

    @functools.partial(jax.jit, static_argnums=0)
    def pathwise_per_rep(self, params: dict) -> dict:
        """Per-replication pathwise derivatives of the mean waiting time (forward mode).

        Returns:
            dict name -> ``(replications,)`` for ``lam``, ``scale`` and ``speed``.
        """
        params = self.full_params(params)
        out = {}
        for name in ("lam", "scale", "speed"):
            tangent = {k: jnp.zeros_like(v) for k, v in params.items()}
            tangent[name] = jnp.ones_like(params[name])
            _, d = jax.jvp(self._f_rep, (params,), (tangent,))
            out[name] = d
        return out

    @functools.partial(jax.jit, static_argnums=0)
    def score_per_rep(self, params: dict):
        """Per-replication score-function estimates of ``d E[mean wait] / d logits``.

        ``g_r = (f_r - b_r) sum_n (e_{c_n} - p)`` with the leave-one-out baseline
        ``b_r = (sum_j f_j - f_r) / (R - 1)``; shape ``(replications, classes)``.
        """
        params = self.full_params(params)
        w, cls = self.waits(params)
        f = w[:, self.n_warmup :].mean(axis=1)
        R = f.shape[0]
        b = (jnp.sum(f) - f) / (R - 1)
        p = jax.nn.softmax(params["logits"])
        C = p.shape[0]
        counts = jnp.sum(cls[:, :, None] == jnp.arange(C)[None, None, :], axis=1)
        score = counts.astype(self.dtype) - self.n_jobs * p[None, :]
        return jax.lax.stop_gradient((f - b)[:, None] * score)

    def gradients(self, params: dict, *, level: float = 0.95) -> dict:
        """Gradient estimates of the mean waiting time with confidence intervals.

        Returns:
            dict name -> :class:`jaxqueue.stats.Estimate` for ``lam``, ``scale``, ``speed``
            (pathwise) and ``logits`` (score function, per class).
        """
        pw = self.pathwise_per_rep(params)
        out = {k: mean_ci(v, level=level) for k, v in pw.items()}
        out["logits"] = mean_ci(self.score_per_rep(params), level=level)
        return out

    @functools.partial(jax.jit, static_argnums=(0, 2))
    def finite_difference(self, params: dict, name: str, h, direction=None):
        """Per-replication central finite difference of the mean waiting time with common
        random numbers: ``(f(theta + h e) - f(theta - h e)) / (2 h)``, shape (replications,).

        Args:
            params: parameters.
            name: ``"lam"``, ``"scale"``, ``"speed"`` or ``"logits"``.
            h: step.
            direction: for ``logits``, the direction ``e`` (default: none for scalars).
        """
        params = self.full_params(params)
        e = jnp.ones_like(params[name]) if direction is None else jnp.asarray(direction)
        up = dict(params, **{name: params[name] + h * e})
        dn = dict(params, **{name: params[name] - h * e})
        return (self._f_rep(up) - self._f_rep(dn)) / (2 * h)
