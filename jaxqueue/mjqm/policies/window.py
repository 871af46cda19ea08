"""``window:W``: first fit restricted to the first ``W`` waiting jobs."""

from __future__ import annotations

import equinox as eqx

from ._base import EventPolicy, Jobs, first_fit


class Window(EventPolicy):
    """Non-preemptive: as first-fit, but only the first ``W`` waiting jobs (arrival order) may
    start; the window slides as they start, so ``W = 1`` is FCFS and ``W = infinity``
    first-fit. Stability limit: the throughput of the saturated system (queue never empty)."""

    W: int = eqx.field(static=True)
    name = "window"

    def __check_init__(self):
        if not (isinstance(self.W, int) and self.W >= 1):
            raise ValueError(f"policy window:W needs an integer W >= 1, got {self.W!r}")

    @property
    def label(self) -> str:
        return f"window:{self.W}"

    def select(self, jobs: Jobs, s: int, needs):
        return jobs.run | first_fit(jobs.waiting, jobs.need, jobs.free(s), window=self.W)

    def stability_limit(self, workload, key=None):
        from .._events import saturated_throughput

        return ("saturated", *saturated_throughput(workload, self, key=key))
