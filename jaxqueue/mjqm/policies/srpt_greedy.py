"""``srpt-greedy``: preemptive greedy SRPT on remaining work (Grosof, Scully, Harchol-Balter
and Scheller-Wolf, "Optimal scheduling in the multiserver-job model under heavy traffic",
POMACS 6(3), 2022: GreedySRPT; the msj-simulator's ``GreedySRPT``)."""

from __future__ import annotations

import jax.numpy as jnp

from ._base import Jobs, Order, Policy, cumsum, in_key_order


class SRPTGreedy(Policy):
    """Preemptive, size-aware: the jobs in the system in increasing remaining work (remaining
    service time x servers needed; arrival order on ties) are served in that order until the
    first that does not fit (no job behind it starts). No closed form of its limit."""

    name = "srpt-greedy"
    preemptive = True
    clairvoyant = True
    size_aware = True
    order = Order.REMAINING_WORK

    def select(self, jobs: Jobs, s: int, needs):
        def prefix(live, need, before):
            x = jnp.where(live, need, 0)
            return live & ((cumsum(x) if before is None else before(x) + x) <= s)

        return in_key_order(jobs.rem * jobs.need, jobs.live, jobs.need, prefix)
