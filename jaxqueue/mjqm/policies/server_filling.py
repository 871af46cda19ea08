"""``server-filling``: preemptive ServerFilling (Grosof, Harchol-Balter and Scheller-Wolf,
"WCFS: a new framework for analyzing multiserver systems", Queueing Systems 102, 2022)."""

from __future__ import annotations

import jax.numpy as jnp

from ._base import EventPolicy, Jobs, cumsum, first_fit


class ServerFilling(EventPolicy):
    """Preemptive: take the shortest arrival-order prefix of the jobs in the system whose
    needs sum to at least ``s`` (or all of them) and serve its jobs largest need first
    (arrival order within a need), each one that fits. When every need divides ``s`` this
    fills all servers whenever the prefix reaches ``s``, so it is throughput optimal: the
    stability limit is ``lambda_ideal = s / E[need x service]``."""

    name = "server-filling"
    preemptive = True

    def select(self, jobs: Jobs, s: int, needs):
        need = jnp.where(jobs.live, jobs.need, 0)
        prefix = jobs.live & (cumsum(need) - need < s)
        return first_fit(prefix, jobs.need, s, by_need=needs)

    def stability_limit(self, workload, key=None):
        s = workload.s
        if all(s % int(a) == 0 for a in workload.cores_array[:, 0]):
            lid = float(workload.lambda_ideal())
            return "ideal", lid, (lid, lid)
        return "unknown", None, None
