"""``easy-backfilling``: EASY backfilling (Lifka, "The ANL/IBM SP scheduling system", JSSPP
1995; Mu'alem and Feitelson, IEEE TPDS 12, 2001), clairvoyant and non-preemptive."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ._base import EventPolicy, Jobs, at_slot, cumsum, fcfs_start, first_fit, first_slot, positions
from ._queues import TOMB, Queues, need_of, rows_min, start


class EasyBackfilling(EventPolicy):
    """Jobs in service stay; waiting jobs start in arrival order while they fit; the first that
    does not fit is the head, whose reservation is the earliest time ``t_r`` at which the
    running jobs (by their exact remaining work) free enough servers for it; a later waiting
    job starts now if it fits and its service time is at most ``t_r`` (it ends before the
    reservation). No stability method is known in general."""

    name = "easy-backfilling"
    clairvoyant = True
    picks_inside = True
    sorted_slots = True  # the reservation: a cumulative sum over the slots
    max_buffer = 1 << 14  # the pick packs a FIFO position (and the capacity) above 16 bits

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

    def pick(self, q: Queues, s: int, needs, now):
        """The front of the FIFO if it fits; else the oldest later job that fits now and ends
        by the head's reservation ``t_r`` (the first end time of a job in service by which the
        free servers plus those of the jobs in service ending by then reach the head's need: a
        cumulative sum over the slots, which the engine keeps sorted by end time
        (``sorted_slots``); on unordered slots a sum over the slots for every slot,
        ``M^2`` operations, was 40% of the pick). Jobs started from behind the front leave
        tombstones (``_queues.TOMB``), not a roll of the deque; where the front starts, the
        pick's pass over the FIFO finds the first live entry behind it instead (``Pick.nxt``:
        one pass, not two)."""
        head = need_of(q.f_info[0])
        head_fits = (q.size[0] > 0) & (head <= q.free)
        sn, se = need_of(q.s_info), q.s_end
        # the servers free once the job of each row has ended (the rows sorted by end time)
        freed = q.free + cumsum(sn)
        t_r = rows_min(jnp.where((sn > 0) & (freed >= head), se, jnp.inf))
        _, rem, info, pos = q.deque(0)
        need = need_of(info)
        # one pass over the FIFO: where the front starts, the first live entry behind it (the
        # head moves there); else the oldest entry that fits now and ends by t_r (the front
        # does not fit; every entry that is not a waiting job is a tombstone, need TOMB: it
        # never fits), and its need, from one minimum of position and need packed (< 2**16)
        ok = jnp.where(head_fits, (need != TOMB) & (pos > 0), (need <= q.free) & (rem <= t_r - now))
        key = rows_min(jnp.where(ok, pos << 16 | need, q.capacity << 16))
        first = key >> 16
        nxt = jnp.where(first < q.capacity, first, q.size[0])
        p = jnp.where(head_fits, 0, first)
        left = q.free - jnp.where(head_fits, head, key & 0xFFFF)
        more = (q.size[0] > 1) & (left >= min(needs))
        return start(0, head_fits | (p < q.capacity), p, more=more, nxt=nxt)
