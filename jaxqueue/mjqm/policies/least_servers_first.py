"""``least-servers-first``: preemptive least-servers-first, the mirror of ``msf`` (the
msj-simulator of Grosof et al. calls it ``LeastServersFirst``)."""

from __future__ import annotations

from ._base import Jobs, Order, Policy, first_fit


class LeastServersFirst(Policy):
    """Preemptive: order all jobs in the system by need, smallest first (arrival order within
    a need), and serve them first fit until the servers are full. No stability method is
    known in general."""

    name = "least-servers-first"
    preemptive = True
    backfills = True
    order = Order.LEAST_SERVERS

    def select(self, jobs: Jobs, s: int, needs):
        return first_fit(jobs.live, jobs.need, s, by_need=self.order.needs(needs))
