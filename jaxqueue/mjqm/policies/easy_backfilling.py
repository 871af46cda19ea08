"""``easy-backfilling``: EASY backfilling (Lifka, "The ANL/IBM SP scheduling system", JSSPP
1995; Mu'alem and Feitelson, IEEE TPDS 12, 2001), clairvoyant and non-preemptive."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ._base import Jobs, PickPolicy, at_slot, cumsum, fcfs_start, first_fit, first_slot, positions
from ._queues import Queues, need_of, rows_min, start

REGISTERS = 16  # waiting jobs in the front registers (``EasyBackfilling.pick``)


class EasyBackfilling(PickPolicy):
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

    @property
    def front_registers(self) -> int:
        return REGISTERS

    def pick(self, q: Queues, s: int, needs, now):
        """The front of the FIFO if it fits; else the oldest later job that fits now and ends
        by the head's reservation ``t_r`` (the first end time of a job in service by which the
        free servers plus those of the jobs in service ending by then reach the head's need: a
        cumulative sum over the slots, which the engine keeps sorted by end time
        (``sorted_slots``); on unordered slots a sum over the slots for every slot,
        ``M^2`` operations, was 40% of the pick).

        The first ``REGISTERS`` waiting jobs are in the front registers (the deque body holds
        the jobs behind them: ``_events._take_inside``), so the pick reads ``REGISTERS`` rows,
        not the deque. Only where the head does not fit, no registered job qualifies and more
        jobs wait may the job lie in the body: one pass over it (``Q x R`` entries, about 1 ns
        each), under a ``lax.cond`` on any replication needing it. Measured (five-class-exp,
        lam 0.900428, 1024 x 2000 jobs, 512 replications per device): a running replication
        needed it in 5.5% of the rounds with 16 registers, in 52% with 8 (the pass ran in 13%
        of the rounds, finished replications included); 12 registers ran 0.88x as fast as 16,
        20 1.01x, 24 0.89x. Every round had passed over the whole deque, 40% of its time."""
        R = REGISTERS
        size, free = q.size[0], q.free
        head = need_of(q.f_info[0])
        head_fits = (size > 0) & (head <= free)
        sn, se = need_of(q.s_info), q.s_end
        # the servers free once the job of each row has ended (the rows sorted by end time)
        freed = free + cumsum(sn)
        t_r = rows_min(jnp.where((sn > 0) & (freed >= head), se, jnp.inf))
        by = t_r - now  # a later job starts if it ends by then
        # the oldest registered job that fits now and ends by t_r, and its need (one minimum
        # of position and need packed, < 2**16); the head fits (row 0) or it is not one
        need = need_of(q.f_info)
        rows = jnp.arange(R, dtype=jnp.int32)[:, None]
        ok = (rows < size) & (need <= free) & (q.f_rem <= by)
        key = rows_min(jnp.where(ok, rows << 16 | need, q.capacity << 16), settled=False)
        # the same over the body where the registers have none but more jobs wait
        behind = ~head_fits & (key >> 16 >= q.capacity) & (size > R) & (free >= min(needs))
        key = lax.cond(jnp.any(behind), _behind, lambda q, key, by: key, q, key, by)
        p = jnp.where(head_fits, 0, key >> 16)
        left = free - jnp.where(head_fits, head, key & 0xFFFF)
        # another pick may follow if another waiting job fits in what is left (in the body:
        # any need); a tighter bound than min(needs): 3.5% of the rounds picked nothing
        others = jnp.where((rows < size) & (rows != p), need, 1 << 16)
        least = jnp.where(size > R, min(needs), rows_min(others, settled=False))
        more = left >= least
        return start(0, head_fits | (p < q.capacity), p, more=more)


def _behind(q: Queues, key, by):
    """``key`` where it names a registered job; else the position and need of the oldest job
    in the deque body (positions ``REGISTERS`` on) that fits now and ends by ``by``: one pass
    over every entry (about 1 ns each)."""
    _, rem, info, pos = q.deque(0)
    need = need_of(info)
    ok = (pos >= REGISTERS) & (pos < q.size[0]) & (need <= q.free) & (rem <= by)
    body = rows_min(jnp.where(ok, pos << 16 | need, q.capacity << 16))
    return jnp.minimum(key, body)
