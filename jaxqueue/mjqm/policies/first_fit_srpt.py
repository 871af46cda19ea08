"""``first-fit-srpt``: preemptive first fit in SRPT order of remaining work (Grosof et al.,
POMACS 2022; the msj-simulator's ``FirstFitSRPT``)."""

from __future__ import annotations

from ._base import Jobs, Order, Policy, first_fit, in_key_order


class FirstFitSRPT(Policy):
    """Preemptive, size-aware: the jobs in the system in increasing remaining work (remaining
    service time x servers needed; arrival order on ties), each served if it fits in what the
    jobs before it leave (first fit). No closed form of its limit."""

    name = "first-fit-srpt"
    preemptive = True
    clairvoyant = True
    backfills = True
    size_aware = True
    order = Order.REMAINING_WORK

    def select(self, jobs: Jobs, s: int, needs):
        return in_key_order(
            jobs.rem * jobs.need, jobs.live, jobs.need, lambda live, need: first_fit(live, need, s)
        )
