"""``least-servers-first``: preemptive least-servers-first, the mirror of ``msf`` (the
msj-simulator of Grosof et al. calls it ``LeastServersFirst``)."""

from __future__ import annotations

from ._base import Order, PreemptiveByOrder


class LeastServersFirst(PreemptiveByOrder):
    """Preemptive: order all jobs in the system by need, smallest first (arrival order within
    a need), and serve them first fit until the servers are full. No stability method is
    known in general."""

    name = "least-servers-first"
    order = Order.LEAST_SERVERS
