"""``window:W``: first fit restricted to the first ``W`` waiting jobs."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp

from ._base import Jobs, PickPolicy, first_fit
from ._queues import Queues, need_of, rows_min, rows_sum, start


class Window(PickPolicy):
    """Non-preemptive: as first-fit, but only the first ``W`` waiting jobs (arrival order) may
    start; the window slides as they start, so ``W = 1`` is FCFS and ``W = infinity``
    first-fit. Stability limit: the throughput of the saturated system (queue never empty)."""

    W: int = eqx.field(static=True)
    name = "window"
    saturation_limit = True

    def __check_init__(self):
        if not (isinstance(self.W, int) and self.W >= 1):
            raise ValueError(f"policy window:W needs an integer W >= 1, got {self.W!r}")

    @property
    def label(self) -> str:
        return f"window:{self.W}"

    @property
    def front_registers(self) -> int:
        return self.W

    def select(self, jobs: Jobs, s: int, needs):
        return jobs.run | first_fit(jobs.waiting, jobs.need, jobs.free(s), window=self.W)

    def pick(self, q: Queues, s: int, needs, now):
        """The oldest of the first ``W`` jobs of the FIFO that fits in the free servers (all
        ``W`` are in the front registers: no pass over the deque)."""
        need = need_of(q.f_info)
        pos = jnp.arange(self.W, dtype=jnp.int32)[:, None]
        ok = (pos < q.size[0]) & (need <= q.free)
        p = rows_min(jnp.where(ok, pos, self.W))
        left = q.free - rows_sum(jnp.where(pos == p, need, 0))
        return start(0, p < self.W, p, more=(q.size[0] > 1) & (left >= min(needs)))

    def stability_limit(self, workload, key=None):
        from .._events import saturated_throughput

        return ("saturated", *saturated_throughput(workload, self, key=key))
