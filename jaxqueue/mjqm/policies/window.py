"""``window:W``: first fit restricted to the first ``W`` waiting jobs."""

from __future__ import annotations

import equinox as eqx

from ._base import IntegerParameter, Jobs, first_fit


class Window(IntegerParameter):
    """Non-preemptive: as first-fit, but only the first ``W`` waiting jobs (arrival order) may
    start; the window slides as they start, so ``W = 1`` is FCFS and ``W = infinity``
    first-fit. Stability limit: the throughput of the saturated system (queue never empty)."""

    W: int = eqx.field(static=True)
    name = "window"
    parameter = "W"
    least = 1
    backfills = True
    saturation_limit = True

    @property
    def lookahead(self) -> int:
        return self.W

    def select(self, jobs: Jobs, s: int, needs):
        return jobs.run | first_fit(jobs.waiting, jobs.need, jobs.free(s), window=self.W)
