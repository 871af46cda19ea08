"""``easy-backfilling:estimate=F``: EASY backfilling planned with inexact run-time estimates
(Mu'alem and Feitelson, IEEE TPDS 12, 2001, Section 5: user estimates; the msj-simulator's
``EASYBackfillingEstimate``): each job's estimate is its size rounded up to the next integer
power of ``F``; the job still runs its true size."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp

from ..._jit import rows_min, rows_sum, settle
from ._base import Jobs, Policy, fcfs_start, first_fit, positions


class EasyBackfillingEstimate(Policy):
    """As ``easy-backfilling``, with estimates ``e = F^ceil(log_F(size))`` in place of the
    true sizes: the head's reservation is the first estimated end (start plus ``e``) of the
    running jobs by which the free servers reach its need, and a later waiting job
    backfills if it fits now and its estimate is at most the time to that reservation. The
    jobs run their true sizes (a job ending before its estimate frees its servers early). No
    closed form of its limit."""

    F: float = eqx.field(static=True)
    name = "easy-backfilling"
    clairvoyant = True
    backfills = True
    reserves = True
    size_aware = True
    estimates = True
    estimated_ends = True

    def __check_init__(self):
        if not (isinstance(self.F, float) and self.F > 1.0 and self.F < float("inf")):
            raise ValueError(
                f"policy easy-backfilling:estimate=F needs a number F > 1, got {self.F!r}"
            )

    @property
    def label(self) -> str:
        return f"easy-backfilling:estimate={self.F:g}"

    def estimate(self, size):
        """``F^ceil(log_F(size))``."""
        F = jnp.asarray(self.F, size.dtype)
        return F ** jnp.ceil(jnp.log(size) / jnp.log(F))

    def select(self, jobs: Jobs, s: int, needs):
        if jobs.size is None:
            raise ValueError("easy-backfilling:estimate=F: needs the job sizes (Jobs.size)")
        live = jobs.live
        size = jnp.where(live, jobs.size, 1.0)
        est = self.estimate(size) if jobs.estimate is None else jobs.estimate
        # the time left to the estimated end: the estimate less the time since the start
        # (``age - wait``), exact where the times are whole or the job starts now
        (est,) = settle(est - jnp.where(jobs.started, jobs.age - jobs.wait, 0.0))
        run = fcfs_start(jobs, s)
        waiting = jobs.live & ~run
        pos = positions(waiting)
        # the free servers, the head and its need as trees over the rows, materialised once
        free = s - rows_sum(jnp.where(run, jobs.need, 0), settled=False)
        head = rows_min(jnp.where(waiting, pos, waiting.shape[0]), settled=False)
        free, head = settle(free, head)
        need_head = rows_sum(jnp.where(pos == head, jobs.need, 0))
        # the earliest estimated end by which the servers freed (those ending no later)
        # reach the head's need: a pairwise pass over the rows, no sort
        ends = jnp.where(run, est, jnp.inf)
        freed = free + sum(
            jnp.where(ends[i] <= ends, jobs.need[i] * run[i], 0) for i in range(ends.shape[0])
        )
        t_r = rows_min(jnp.where(run & (freed >= need_head), ends, jnp.inf), settled=True)
        later = waiting & (pos > head) & (est <= t_r)
        return run | first_fit(later, jobs.need, free, needs=tuple(needs))
