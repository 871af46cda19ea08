"""EASY backfilling planned with a log's requested times (``easy-backfilling:estimate=requested``,
a replay only): the scheduler of most logs of the Parallel Workloads Archive (Mu'alem and
Feitelson, IEEE TPDS 12, 2001, Section 5: user estimates). Each job's estimate is its
requested time (SWF field 9; the CSV column ``requested_time``), or its run time where the log
has no request or the job ran past it (its scheduler would have ended it there; the log's run
time stands); the jobs run their true run times.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..mjqm.policies import EasyBackfillingEstimate

__all__ = ["REQUESTED", "EasyBackfillingRequested", "estimates"]

REQUESTED = "easy-backfilling:estimate=requested"


class EasyBackfillingRequested(EasyBackfillingEstimate):
    """As ``easy-backfilling:estimate=F``, each job's estimate its own: the engine gives the
    policy the estimate as the job's size (``Jobs.size``: ``sizes`` of
    :func:`jaxqueue.mjqm.engines.events.replay`) and the work as its remaining work. A
    running job's estimated remaining time is its estimate less the time it has been in
    service (``age - wait``: no preemption), which ``select`` of ``estimate=F`` reads as
    ``size - (size - rem)`` with ``estimate`` the identity."""

    F: float = eqx.field(static=True, default=2.0)  # unused: the jobs' own estimates
    estimated_ends = False  # its estimates are given per job, not a function of the size

    @property
    def label(self) -> str:
        return REQUESTED

    def estimate(self, size):
        return size

    def select(self, jobs, s: int, needs):
        served = jnp.where(jobs.started, jobs.age - jobs.wait, jnp.zeros((), jobs.age.dtype))
        return super().select(jobs._replace(rem=jobs.size - served), s, needs)


def estimates(requested, runtime) -> tuple[np.ndarray, dict]:
    """Each job's estimate (module docstring) and how many jobs got which."""
    req = np.asarray(requested, dtype=np.float64)
    known = np.isfinite(req) & (req > 0)
    over = known & (req < runtime)
    est = np.where(known & ~over, req, runtime)
    counts = {
        "requested time": int((known & ~over).sum()),
        "run time (no request)": int((~known).sum()),
        "run time (ran past its request)": int(over.sum()),
    }
    return est, counts
