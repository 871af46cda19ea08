"""The result of the exact solver: :class:`ExactResult`."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..._tables import per_class
from ...dist import Exponential
from ...stats import Result, Status
from .._workload import Workload
from ._ph import ph_key
from ._ph_solve import ph_forms
from ._ph_wait import ph_wait_distribution
from ._structure import _shape
from ._wait import WaitDistribution, wait_distribution


class ExactResult(Result):
    """The exact stationary metrics of an FCFS MJQM with phase-type services.

    Attributes:
        lam: the arrival rate. lambda_c: the exact stability limit.
        wait_mean: mean waiting time of all jobs ``E[number waiting] / lam`` (Little).
        wait_mean_class: ``(K,)`` mean wait per class ``Lq_i / (lam p_i)`` with
            ``Lq_i = P(head is class i) + p_i E[jobs behind the head]``.
        jobs_mean: mean number in system. jobs_waiting_mean: mean number waiting.
        jobs_waiting_class: ``(K,)`` ``Lq_i``. jobs_service_class: ``(K,)`` mean ``n_i``.
        p_wait: probability that an arriving job waits (PASTA).
        idle_servers: mean idle servers ``E[s - a.n]`` (equals ``s - lam sum p_i a_i m_i``).
        hol_idle_servers: mean idle servers while someone waits (HOL waste).
        response_mean, response_mean_class: mean response (sojourn) times, wait plus
            mean service (properties).
        workload: the workload solved (``mjqm.exact`` sets it); the wait distribution
            methods (``wait_tail``, ``wait_cdf``, ``wait_quantile``, ``p_wait_class``) use it.
        stable: ``lam < lambda_c (1 - 100 sqrt(eps))``; when not, every metric is ``inf``
            (or 1 for ``p_wait``): beyond the limit the means are infinite, and within that
            relative gap the QBD cannot be solved accurately in the dtype.
        phases: size of the repeating block. levels: boundary levels ``N*``.
    """

    lam: Float[Array, ""]
    lambda_c: Float[Array, ""]
    wait_mean: Float[Array, ""]
    wait_mean_class: Float[Array, " classes"]
    jobs_mean: Float[Array, ""]
    jobs_waiting_mean: Float[Array, ""]
    jobs_waiting_class: Float[Array, " classes"]
    jobs_service_class: Float[Array, " classes"]
    p_wait: Float[Array, ""]
    idle_servers: Float[Array, ""]
    hol_idle_servers: Float[Array, ""]
    stable: Array
    phases: int = eqx.field(static=True)
    levels: int = eqx.field(static=True)
    workload: Workload | None = None

    def wait_distribution(self, *, steps=None, quantiles=(), times=()) -> WaitDistribution:
        """The :class:`~jaxqueue.mjqm.WaitDistribution` of every class at this load: with
        ``steps`` (static) under ``jit`` / ``grad``, else as many uniformisation steps as the
        ``quantiles`` and ``times`` asked for need (concrete loads only)."""
        if self.workload is None:
            raise ValueError("wait: this ExactResult carries no workload (use mjqm.exact)")
        if np.ndim(self.lam) != 0:
            raise ValueError("wait: one load at a time (not a batched ExactResult)")
        s, cores = _shape(self.workload)
        if not all(isinstance(law, Exponential) for law in self.workload.services):
            forms, p = ph_forms(self.workload)
            key = ph_key(self.workload, s, cores)
            lam = jnp.asarray(self.lam, p.dtype)
            kw = {"steps": steps, "quantiles": quantiles, "times": times}
            return ph_wait_distribution(key, forms, p, lam, **kw)
        mean = self.workload.mean_service()
        dt = jnp.result_type(self.lam, mean, self.workload.probs, float)
        mu, p = 1.0 / mean.astype(dt), jnp.asarray(self.workload.probs).astype(dt)
        return wait_distribution(
            s, cores, mu, p, self.lam, steps=steps, quantiles=quantiles, times=times
        )

    def wait_tail(self, t, cls: int | None = None, *, steps=None) -> Float[Array, ""]:
        """``P(W > t)`` for class ``cls`` (``None``: all jobs); see :meth:`wait_distribution`."""
        return self.wait_distribution(steps=steps, times=(t,)).tail(t, cls)

    def wait_cdf(self, t, cls: int | None = None, *, steps=None) -> Float[Array, ""]:
        """``P(W <= t)`` for class ``cls`` (``None``: all jobs)."""
        return 1.0 - self.wait_tail(t, cls, steps=steps)

    def wait_quantile(self, q, cls: int | None = None, *, steps=None) -> Float[Array, ""]:
        """The ``q``-quantile of the wait of class ``cls`` (``None``: all jobs)."""
        return self.wait_distribution(steps=steps, quantiles=(q,)).quantile(q, cls)

    @property
    def p_wait_class(self) -> Float[Array, " classes"]:
        """``(K,)`` probability that a class-``i`` job waits, ``P(W_i > 0)``."""
        return self.wait_distribution(steps=0).u[0, :-1]

    @property
    def response_mean_class(self) -> Float[Array, " classes"]:
        """``(K,)`` mean response (sojourn) time per class: mean wait plus mean service."""
        return self.wait_mean_class + self._mean_service()

    @property
    def response_mean(self) -> Float[Array, ""]:
        """Mean response (sojourn) time of all jobs: ``wait_mean + sum_i p_i m_i``."""
        return self.wait_mean + jnp.asarray(self.workload.probs) @ self._mean_service()

    def _mean_service(self) -> Array:
        if self.workload is None:
            raise ValueError("response: this ExactResult carries no workload (use mjqm.exact)")
        return self.workload.mean_service()

    @property
    def status(self) -> Status:
        """``ok``, or ``unstable`` when some load is at or beyond ``lambda_c``."""
        return Status.ok if bool(np.all(np.asarray(self.stable))) else Status.unstable

    def status_reason(self) -> str:
        """Why the status is not ``ok``, in one line."""
        return "a load is at or beyond lambda_c: the means are infinite"

    def to_frame(self, workload: Workload | None = None):
        """One row per class: ``class``, ``lam``, ``lambda_c``, ``wait_mean``, ``jobs_waiting``,
        ``jobs_in_service`` and, given the ``workload``, ``cores``, ``prob``, ``mean_service``,
        ``response_mean``; a batched result (``jax.vmap`` over loads) gets a ``point`` column.
        Needs pandas (``pip install 'jaxqueue[tables]'``)."""

        wait = np.asarray(self.wait_mean_class, dtype=float)
        cols = {"wait_mean": wait}
        if workload is not None:
            means = np.asarray(workload.mean_service(), dtype=float)
            cols = {
                "cores": np.broadcast_to([c[0] for c in workload.cores], wait.shape),
                "prob": np.broadcast_to(np.asarray(workload.probs, dtype=float), wait.shape),
                "mean_service": np.broadcast_to(means, wait.shape),
                "wait_mean": wait,
                "response_mean": wait + means,
            }
        cols |= {
            "jobs_waiting": self.jobs_waiting_class,
            "jobs_in_service": self.jobs_service_class,
        }
        return per_class(cols, point={"lam": self.lam, "lambda_c": self.lambda_c})
