"""``server-filling-srpt``: ServerFilling on the queue in SRPT order of remaining work
(Grosof, Scully, Harchol-Balter and Scheller-Wolf, "Optimal scheduling in the multiserver-job
model under heavy traffic", POMACS 6(3), 2022, Section 4: ServerFilling-SRPT)."""

from __future__ import annotations

from ._base import ByRemainingWork
from .server_filling import ServerFilling, fill_prefix


class ServerFillingSRPT(ByRemainingWork):
    """Preemptive, size-aware: order the jobs in the system by remaining work (remaining
    service time x servers needed; arrival order on ties), take the shortest prefix in that
    order whose needs sum to at least ``s`` (or all of them) and serve its jobs largest need
    first (that order within a need), each one that fits. When the needs and ``s`` form a
    divisibility chain it fills every server whenever the prefix reaches ``s``, as
    server-filling does, so its stability limit is ``lambda_ideal``."""

    name = "server-filling-srpt"

    def fit(self, live, need, s: int, needs, before):
        return fill_prefix(live, need, s, needs, before)

    def closed_form_limit(self, workload) -> float | None:
        return ServerFilling().closed_form_limit(workload)
