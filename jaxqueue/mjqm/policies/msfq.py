"""``msfq:L``: most servers first with quick swap (Chen, Anggraito, Olliaro, Marin, Ajmone
Marsan, Berg and Grosof, "MSFQ: most servers first with quick swap", 2025; NeDS-Lab's
mjqm-simulator calls it ``QuickSwap``), non-preemptive, with threshold ``L``."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp

from ._base import IntegerParameter, Jobs, Order, first_fit


class MSFQ(IntegerParameter):
    """Non-preemptive MSF with a swap flag (its state, off at the start); ``K`` the largest
    need of the workload. At every event: (a) if the flag is on and ``K`` servers are free,
    it goes off; (b) unless it is on, waiting jobs start first fit, largest need first
    (arrival order within a need); (c) if it is off, no ``K``-job is in service, one waits and
    at most ``L`` servers are busy, it goes on: nothing starts until a ``K``-job fits. In the
    one-or-all case (needs 1 and ``K = s``) these are the paper's four phases with threshold
    ``L``; ``L = 0`` never swaps (non-preemptive MSF, not ``msf``, which preempts).
    ``0 <= L < s``."""

    L: int = eqx.field(static=True)
    name = "msfq"
    parameter = "L"
    backfills = True
    memory = True
    order = Order.MOST_SERVERS

    def bind(self, workload) -> MSFQ:
        if self.L >= workload.s:
            raise ValueError(f"policy msfq:{self.L}: L must be below s = {workload.s}")
        return self

    def select(self, jobs: Jobs, s: int, needs):
        return self.step(jobs, s, needs, jnp.zeros_like(jobs.count))[0]

    def step(self, jobs: Jobs, s: int, needs, state):
        K = needs[0]
        busy = s - jobs.free(s)
        swap = (state > 0) & (s - busy < K)  # (a)
        start = first_fit(jobs.waiting, jobs.need, s - busy, by_need=tuple(needs))  # (b)
        run = jobs.run | (start & ~swap[None])
        big = jobs.live & (jobs.need == K)
        busy = s - jobs._replace(run=run).free(s)
        on = ~swap & ~jnp.any(big & run, axis=0) & jnp.any(big & ~run, axis=0) & (busy <= self.L)
        return run, jobs.mark, (swap | on).astype(state.dtype)  # (c)
