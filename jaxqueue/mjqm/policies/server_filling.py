"""``server-filling``: preemptive ServerFilling (Grosof, Harchol-Balter and Scheller-Wolf,
"WCFS: a new framework for analyzing multiserver systems", Queueing Systems 102, 2022)."""

from __future__ import annotations

import jax.numpy as jnp

from ._base import Jobs, Order, Policy, counts_ahead, cumsum, first_fit, fit_by_need


def fill_prefix(live, need, s: int, needs, before=None):
    """ServerFilling on the ``live`` jobs in slot order (with ``before``, in the order of
    :func:`~._base.in_key_order`): the shortest prefix whose needs reach ``s``, served largest
    need first (that order within a need), first fit; ``needs``: the distinct needs, largest
    first (every need of the live jobs)."""
    if before is None:
        x = jnp.where(live, need, 0)
        prefix = live & (cumsum(x) - x < s)
        return first_fit(prefix, need, s, by_need=Order.MOST_SERVERS.needs(needs))
    order = Order.MOST_SERVERS.needs(needs)
    counts = counts_ahead(before, live, need, order)
    prefix = live & (sum(v * c for v, c in zip(order, counts, strict=True)) < s)
    return fit_by_need(prefix, need, s, order, counts)  # the prefix's jobs ahead: the live ones


class ServerFilling(Policy):
    """Preemptive: take the shortest arrival-order prefix of the jobs in the system whose
    needs sum to at least ``s`` (or all of them) and serve its jobs largest need first
    (arrival order within a need), each one that fits. When the needs form a divisibility
    chain (each divides the next larger one) and the largest divides ``s``, this fills all
    servers whenever the prefix reaches ``s`` (Grosof et al., Lemma 1), so it is throughput
    optimal: the stability limit is ``lambda_ideal = s / E[need x service]``. Needs that merely
    divide ``s`` are not enough (``s = 6``, needs 2 and 3: the prefix 3, 2, 2 leaves a server
    idle)."""

    name = "server-filling"
    preemptive = True
    backfills = True
    order = Order.MOST_SERVERS
    prefix_servers = True

    def select(self, jobs: Jobs, s: int, needs):
        return fill_prefix(jobs.live, jobs.need, s, needs)

    def closed_form_limit(self, workload) -> float | None:
        """``lambda_ideal`` where the needs and ``s`` form a divisibility chain (class
        docstring), else unknown."""
        needs = sorted({int(a) for a in workload.cores_array[:, 0]}) + [workload.s]
        if all(b % a == 0 for a, b in zip(needs, needs[1:], strict=False)):
            return float(workload.lambda_ideal())
        return None
