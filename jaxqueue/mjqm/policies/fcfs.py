"""``fcfs``: first come, first served (``mjsre`` Section 2) on the job list.

The MJSRE recurrence eq. (2) (``jaxqueue.mjqm.simulate``) is the fast path for FCFS; on the
event engine it is tested to give the same waits job by job on the same inputs."""

from __future__ import annotations

from ._base import Jobs, Policy, fcfs_start


class FCFS(Policy):
    """Non-preemptive: waiting jobs start in arrival order while the oldest waiting one fits;
    the first that does not fit blocks everyone behind it. Stability limit: ``lambda_c`` of
    the FCFS MJQM (exact for exponential services, else pile growth)."""

    name = "fcfs"
    recurrence = True

    def select(self, jobs: Jobs, s: int, needs):
        return fcfs_start(jobs, s)
