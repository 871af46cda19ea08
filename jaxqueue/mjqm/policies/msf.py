"""``msf``: preemptive most-servers-first."""

from __future__ import annotations

from ._base import Jobs, PickPolicy, first_fit
from ._queues import Queues, by_need


class MostServersFirst(PickPolicy):
    """Preemptive: order all jobs in the system by need, largest first (arrival order within a
    need), and serve them first fit until the servers are full. No stability method is known
    in general."""

    name = "msf"
    layout = "need"
    preemptive = True

    def select(self, jobs: Jobs, s: int, needs):
        return first_fit(jobs.live, jobs.need, s, by_need=needs)

    def pick(self, q: Queues, s: int, needs, now):
        return by_need(q, s, needs)
