"""``msf``: preemptive most-servers-first."""

from __future__ import annotations

from ._base import Order, PreemptiveByOrder


class MostServersFirst(PreemptiveByOrder):
    """Preemptive: order all jobs in the system by need, largest first (arrival order within a
    need), and serve them first fit until the servers are full. No stability method is known
    in general."""

    name = "msf"
    order = Order.MOST_SERVERS
