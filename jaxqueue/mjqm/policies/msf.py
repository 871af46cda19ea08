"""``msf``: preemptive most-servers-first."""

from __future__ import annotations

from ._base import Jobs, Order, Policy, first_fit


class MostServersFirst(Policy):
    """Preemptive: order all jobs in the system by need, largest first (arrival order within a
    need), and serve them first fit until the servers are full. No stability method is known
    in general."""

    name = "msf"
    preemptive = True
    backfills = True
    order = Order.MOST_SERVERS

    def select(self, jobs: Jobs, s: int, needs):
        return first_fit(jobs.live, jobs.need, s, by_need=self.order.needs(needs))
