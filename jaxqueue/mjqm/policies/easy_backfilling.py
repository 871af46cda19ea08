"""``easy-backfilling``: EASY backfilling (Lifka, "The ANL/IBM SP scheduling system", JSSPP
1995; Mu'alem and Feitelson, IEEE TPDS 12, 2001), clairvoyant and non-preemptive."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ._base import Jobs, Policy, at_slot, cumsum, fcfs_start, first_fit, first_slot, positions


class EasyBackfilling(Policy):
    """Jobs in service stay; waiting jobs start in arrival order while they fit; the first that
    does not fit is the head, whose reservation is the earliest time ``t_r`` at which the
    running jobs (by their exact remaining work) free enough servers for it; a later waiting
    job starts now if it fits and its service time is at most ``t_r`` (it ends before the
    reservation). No stability method is known in general."""

    name = "easy-backfilling"
    clairvoyant = True
    backfills = True
    reserves = True

    def select(self, jobs: Jobs, s: int, needs):
        run = fcfs_start(jobs, s)
        jobs = jobs._replace(run=run)
        free = jobs.free(s)
        waiting = jobs.waiting
        head = first_slot(waiting)  # the oldest waiting job (B if none)
        need_head = at_slot(jobs.need, head)
        # the running jobs by end time; the reservation is the first end time by which the
        # free servers plus those of the jobs ended reach the head's need
        ends = jnp.where(run, jobs.rem, jnp.inf)
        ends, freed = lax.sort((ends, jnp.where(run, jobs.need, 0)), dimension=0, num_keys=1)
        freed = free + cumsum(freed)
        t_r = jnp.min(jnp.where(freed >= need_head, ends, jnp.inf), axis=0)
        later = waiting & (positions(waiting) > head) & (jobs.rem <= t_r)
        return run | first_fit(later, jobs.need, free)
