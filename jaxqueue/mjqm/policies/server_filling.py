"""``server-filling``: preemptive ServerFilling (Grosof, Harchol-Balter and Scheller-Wolf,
"WCFS: a new framework for analyzing multiserver systems", Queueing Systems 102, 2022)."""

from __future__ import annotations

import jax.numpy as jnp

from ._base import EventPolicy, Jobs, cumsum, first_fit
from ._queues import Pick, Queues, by_need, need_of


class ServerFilling(EventPolicy):
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
    layout = "prefix"

    def select(self, jobs: Jobs, s: int, needs):
        need = jnp.where(jobs.live, jobs.need, 0)
        prefix = jobs.live & (cumsum(need) - need < s)
        return first_fit(prefix, jobs.need, s, by_need=needs)

    def pick(self, q: Queues, s: int, needs, now):
        """While the prefix holds fewer than ``s`` servers' worth of needs, the oldest job
        behind it joins (kind 3); then msf within the prefix."""
        grow = (q.prefix < s) & (q.size[-1] > 0)
        need = need_of(q.f_info[-1])
        d = sum(jnp.where(need == v, k, 0) for k, v in enumerate(needs))
        inner = by_need(q, s, needs)
        return Pick(
            jnp.where(grow, 3, inner.kind).astype(jnp.int32),
            jnp.where(grow, d, inner.d).astype(jnp.int32),
            inner.p,
            inner.i,
            grow | inner.more,
        )

    def stability_limit(self, workload, key=None):
        needs = sorted({int(a) for a in workload.cores_array[:, 0]}) + [workload.s]
        if all(b % a == 0 for a, b in zip(needs, needs[1:], strict=False)):
            lid = float(workload.lambda_ideal())
            return "ideal", lid, (lid, lid)
        return "unknown", None, None
