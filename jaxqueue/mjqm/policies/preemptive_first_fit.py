"""``preemptive-first-fit``: first fit over all jobs in arrival order, at every event."""

from __future__ import annotations

from ._base import Jobs, Policy, first_fit


class PreemptiveFirstFit(Policy):
    """Preemptive (preempt-resume): at every event, scan all jobs in the system in arrival
    order and serve every one that fits, until the servers are full. No stability method is
    known."""

    name = "preemptive-first-fit"
    preemptive = True
    backfills = True

    def select(self, jobs: Jobs, s: int, needs):
        return first_fit(jobs.live, jobs.need, s)
