"""``first-fit``: non-preemptive first fit in arrival order."""

from __future__ import annotations

from ._base import Jobs, Policy, first_fit


class FirstFit(Policy):
    """Jobs in service stay; the waiting jobs are scanned in arrival order and every one that
    fits in the free servers starts. No stability method is known (the drift check guards)."""

    name = "first-fit"
    backfills = True

    def select(self, jobs: Jobs, s: int, needs):
        return jobs.run | first_fit(jobs.waiting, jobs.need, jobs.free(s))
