"""``first-fit``: non-preemptive first fit in arrival order."""

from __future__ import annotations

import jax.numpy as jnp

from ._base import Jobs, PickPolicy, first_fit
from ._queues import Queues, first_where, start


class FirstFit(PickPolicy):
    """Jobs in service stay; the waiting jobs are scanned in arrival order and every one that
    fits in the free servers starts. No stability method is known (the drift check guards)."""

    name = "first-fit"
    layout = "need"

    def select(self, jobs: Jobs, s: int, needs):
        return jobs.run | first_fit(jobs.waiting, jobs.need, jobs.free(s))

    def pick(self, q: Queues, s: int, needs, now):
        """The oldest front of the per-need deques whose need fits in the free servers (within a
        need, jobs start in arrival order: the free count only falls during a scan)."""
        need = jnp.asarray(needs, jnp.int32)[:, None]
        fits = (q.size > 0) & (need <= q.free)
        d, ok = first_where(fits, q.f_arr)
        hit = jnp.arange(len(needs), dtype=jnp.int32)[:, None] == d
        left = q.free - jnp.sum(jnp.where(hit, need, 0), axis=0)
        more = jnp.any((q.size - hit > 0) & (need <= left), axis=0)
        return start(d, ok, more=more)
