"""``msf``: preemptive most-servers-first."""

from __future__ import annotations

from ._base import Order, PreemptiveByOrder
from .server_filling import ServerFilling


class MostServersFirst(PreemptiveByOrder):
    """Preemptive: order all jobs in the system by need, largest first (arrival order within a
    need), and serve them first fit until the servers are full. When the needs and ``s`` form
    a divisibility chain, first fit in decreasing need packs exactly (the free servers stay a
    multiple of every need still to come), so every server is busy whenever the jobs present
    need ``s`` or more, and the limit is ``lambda_ideal``, as for server-filling (Grosof,
    Harchol-Balter and Scheller-Wolf, WCFS, 2022); otherwise no closed form."""

    name = "msf"
    order = Order.MOST_SERVERS

    def closed_form_limit(self, workload) -> float | None:
        """``lambda_ideal`` under a divisibility chain (class docstring), else unknown."""
        return ServerFilling().closed_form_limit(workload)
