"""``maxweight``: preemptive MaxWeight for the multiserver-job queue (Maguluri, Srikant and
Ying, "Stochastic models of load balancing and scheduling in cloud computing clusters",
INFOCOM 2012; the msj-simulator of Grosof et al. calls it ``MaxWeight``)."""

from __future__ import annotations

from ._base import Jobs, Order, Policy, first_fit, weight_rank
from .server_filling import ServerFilling


class MaxWeight(Policy):
    """Preemptive: with ``c_n`` the jobs of need ``n`` in the system, the needs are ordered by
    weight ``c_n x floor(s / n)``, largest first (a larger need first on equal weights), and
    the jobs are served first fit in that order, arrival order within a need: the need of the
    largest weight gets as many of its jobs as fit, then the others in decreasing weight.
    When the needs and ``s`` form a divisibility chain its limit is ``lambda_ideal``: with
    ``N >= K s^2`` jobs present (``K`` needs) the heaviest need ``n`` has at least ``s / n``
    jobs, which alone fill the ``s`` servers, so every server is busy whenever ``N`` jobs are
    present and the work falls at rate ``s`` (the argument of server-filling, Grosof,
    Harchol-Balter and Scheller-Wolf, WCFS, 2022); otherwise no closed form is given here."""

    name = "maxweight"
    preemptive = True
    backfills = True
    order = Order.MAX_WEIGHT

    def select(self, jobs: Jobs, s: int, needs):
        rank = weight_rank(jobs.live, jobs.need, s, needs)
        return first_fit(jobs.live, jobs.need, s, by_need=tuple(needs), rank=rank)

    def closed_form_limit(self, workload) -> float | None:
        """``lambda_ideal`` under a divisibility chain (class docstring), else unknown."""
        return ServerFilling().closed_form_limit(workload)
