"""The result of the exact solver: :class:`ExactResult`."""

from __future__ import annotations

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float

from ..._tables import per_class
from ...stats import Result, Status
from .._workload import Workload


class ExactResult(Result):
    """The exact stationary metrics of an FCFS MJQM with exponential services.

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
