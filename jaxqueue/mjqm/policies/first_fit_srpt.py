"""``first-fit-srpt``: preemptive first fit in SRPT order of remaining work (Grosof et al.,
POMACS 2022; the msj-simulator's ``FirstFitSRPT``)."""

from __future__ import annotations

from ._base import ByRemainingWork, counts_ahead, first_fit, first_fit_counted


class FirstFitSRPT(ByRemainingWork):
    """Preemptive, size-aware: the jobs in the system in increasing remaining work (remaining
    service time x servers needed; arrival order on ties), each served if it fits in what the
    jobs before it leave (first fit). No closed form of its limit."""

    name = "first-fit-srpt"

    def fit(self, live, need, s: int, needs, before):
        if before is None:  # the slots in key order
            return first_fit(live, need, s)
        return first_fit_counted(live, need, s, needs, counts_ahead(before, live, need, needs))
