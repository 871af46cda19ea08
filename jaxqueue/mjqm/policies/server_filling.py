"""``server-filling``: preemptive ServerFilling (Grosof, Harchol-Balter and Scheller-Wolf,
"WCFS: a new framework for analyzing multiserver systems", Queueing Systems 102, 2022)."""

from __future__ import annotations

import jax.numpy as jnp

from ._base import Jobs, WindowPolicy, cumsum, first_fit
from ._queues import rows_sum, settle


class ServerFilling(WindowPolicy):
    """Preemptive: take the shortest arrival-order prefix of the jobs in the system whose
    needs sum to at least ``s`` (or all of them) and serve its jobs largest need first
    (arrival order within a need), each one that fits. When the needs form a divisibility
    chain (each divides the next larger one) and the largest divides ``s``, this fills all
    servers whenever the prefix reaches ``s`` (Grosof et al., Lemma 1), so it is throughput
    optimal: the stability limit is ``lambda_ideal = s / E[need x service]``. Needs that merely
    divide ``s`` are not enough (``s = 6``, needs 2 and 3: the prefix 3, 2, 2 leaves a server
    idle)."""

    name = "server-filling"

    def select(self, jobs: Jobs, s: int, needs):
        need = jnp.where(jobs.live, jobs.need, 0)
        prefix = jobs.live & (cumsum(need) - need < s)
        return first_fit(prefix, jobs.need, s, by_need=needs)

    def window(self, s: int, needs) -> int:
        """The prefix holds at most ``(s - 1) // min(need) + 1`` jobs (those before its last
        one need fewer than ``s`` servers together)."""
        return (s - 1) // min(needs) + 1

    def serve(self, need, before, rank, s: int, needs):
        """:meth:`select` on the window: a row is in the prefix where the jobs ahead of it
        need fewer than ``s`` servers (``before``); first fit largest need first takes, of
        each need ``v`` in turn, the first ``min(n_v, free // v)`` jobs of the prefix
        (``rank``: 1 + the jobs of the same need ahead of it), ``n_v`` those in the prefix."""
        prefix = (need > 0) & (before < s)
        counts = [rows_sum((prefix & (need == v)).astype(jnp.int32), settled=False) for v in needs]
        takes, free = [], jnp.int32(s)
        for v, n in zip(needs, counts, strict=True):
            takes.append(jnp.minimum(n, free // v))
            free = free - takes[-1] * v
        takes = settle(*takes)  # per replication, once (not per row and slot)
        k = sum(jnp.where(need == v, t[None], 0) for v, t in zip(needs, takes, strict=True))
        return prefix & (rank <= k)

    def closed_form_limit(self, workload) -> float | None:
        """``lambda_ideal`` where the needs and ``s`` form a divisibility chain (class
        docstring), else unknown."""
        needs = sorted({int(a) for a in workload.cores_array[:, 0]}) + [workload.s]
        if all(b % a == 0 for a, b in zip(needs, needs[1:], strict=False)):
            return float(workload.lambda_ideal())
        return None

    def stability_limit(self, workload, key=None):
        lid = self.closed_form_limit(workload)
        return ("unknown", None, None) if lid is None else ("ideal", lid, (lid, lid))
