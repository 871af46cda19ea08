"""``preemptive-first-fit``: first fit over all jobs in arrival order, at every event."""

from __future__ import annotations

from ._base import Jobs, PickPolicy, first_fit
from ._queues import Queues, by_arrival


class PreemptiveFirstFit(PickPolicy):
    """Preemptive (preempt-resume): at every event, scan all jobs in the system in arrival
    order and serve every one that fits, until the servers are full. No stability method is
    known."""

    name = "preemptive-first-fit"
    layout = "need"
    preemptive = True

    def select(self, jobs: Jobs, s: int, needs):
        return first_fit(jobs.live, jobs.need, s)

    def pick(self, q: Queues, s: int, needs, now):
        return by_arrival(q, s, needs)
