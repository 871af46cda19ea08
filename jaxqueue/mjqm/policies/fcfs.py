"""``fcfs``: first come, first served (``mjsre`` Section 2) on the job list.

The MJSRE recurrence eq. (2) (``jaxqueue.mjqm.simulate``) is the fast path for FCFS; this file
is its event-engine twin, tested to give the same waits job by job on the same inputs."""

from __future__ import annotations

from ._base import Jobs, PickPolicy, fcfs_start
from ._queues import Queues, need_of, start


class FCFS(PickPolicy):
    """Non-preemptive: waiting jobs start in arrival order while the oldest waiting one fits;
    the first that does not fit blocks everyone behind it. Stability limit: ``lambda_c`` of
    the FCFS MJQM (exact for exponential services, else pile growth)."""

    name = "fcfs"
    recurrence = True

    def select(self, jobs: Jobs, s: int, needs):
        return fcfs_start(jobs, s)

    def pick(self, q: Queues, s: int, needs, now):
        """The front of the FIFO starts if it fits (and another may follow if servers and
        jobs are left)."""
        need = need_of(q.f_info[0])
        ok = (q.size[0] > 0) & (need <= q.free)
        return start(0, ok, more=(q.size[0] > 1) & (q.free - need >= min(needs)))

    def stability_limit(self, workload, key=None):
        from .._stability import lambda_c_estimate

        est = lambda_c_estimate(workload, key=key)
        return est.method, float(est.lambda_c), tuple(est.lambda_c_ci)
