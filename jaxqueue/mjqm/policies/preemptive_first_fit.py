"""``preemptive-first-fit``: first fit over all jobs in arrival order, at every event."""

from __future__ import annotations

from ._base import Order, PreemptiveByOrder


class PreemptiveFirstFit(PreemptiveByOrder):
    """Preemptive (preempt-resume): at every event, scan all jobs in the system in arrival
    order and serve every one that fits, until the servers are full. No stability method is
    known."""

    name = "preemptive-first-fit"
    order = Order.ARRIVAL
