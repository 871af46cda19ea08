"""``random-assignment``: each job takes servers drawn uniformly at random (``mjsre``
Appendix A), the queue of the random-assignment bound of the FCFS stability limit.

It has a form on the ordered workload vector only (eq. (14) with all servers specific): the
recurrence engine runs it (``mjqm.simulate``, ``mjqm.pile_growth``); the event engine does not.
"""

from __future__ import annotations

from ._base import Jobs, Policy


class RandomAssignment(Policy):
    """Each job waits for the ``alpha`` servers drawn uniformly at random at its arrival, and
    jobs start in arrival order on their drawn servers (Appendix A)."""

    name = "random-assignment"
    recurrence = True
    job_list = False

    def select(self, jobs: Jobs, s: int, needs):
        raise NotImplementedError(
            "random-assignment depends on the servers each job drew, not on a job list"
        )
