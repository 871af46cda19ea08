"""The event engine's state layout for a policy, derived from the policy's facts.

A policy declares what it does (``preemptive``, its first fit's ``order``, ``backfills``,
``lookahead``, ``reserves``, ``prefix_servers``: :class:`~jaxqueue.mjqm.policies.Policy`);
this module alone decides how the engine keeps its jobs (:mod:`._queues`) and which pick
(:mod:`._picks`) runs it:

* a reservation by estimated ends: one FIFO with :data:`~._picks.REGISTERS` front
  registers, the jobs in service sorted by estimated end (easy-backfilling with estimates);
* size-aware (reads each job's size and remaining work) or with a state of its own: every
  job in a row, in arrival order, and the policy's own ``step`` at every event, no picks
  (the SRPT family, server-filling-gittins; msfq);
* serves within its prefix whose needs reach ``s``: prefix rows, no picks (server-filling);
* preemptive: one deque per need, the preemptive first fit in its order (arrival:
  preemptive-first-fit; need: msf, least-servers-first; weight: maxweight);
* non-preemptive, no backfilling: one FIFO, its front (fcfs);
* a reservation: one FIFO with :data:`~._picks.REGISTERS` front registers, the jobs in
  service sorted by end time (easy-backfilling);
* a lookahead of ``W``: one FIFO with its first ``W`` entries in registers (``window:W``);
* partitions per class and shared helpers: one deque per class, the partitions' fronts then
  the oldest front on the helpers (balanced-splitting);
* else: one deque per need, the oldest fitting front (first-fit).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import numpy as np

from ...policies import Order, Policy
from . import _picks

__all__ = ["Layout", "layout_of", "needs_of", "first_buffer"]

_PACKED_BUFFER = 1 << 14  # EASY packs a FIFO position (and the capacity) above 16 bits


@dataclasses.dataclass(frozen=True)
class Layout:
    """How the engine keeps the jobs of one policy (module docstring).

    Attributes:
        preemptive: picks may preempt (a preempted job goes back to its need's deque).
        per_need: one deque per distinct need (else one FIFO).
        registers: entries at the front of the FIFO kept in registers (1: its front).
        inside: a pick may start a job behind the registers, which the body alone holds.
        sorted_slots: the jobs in service sorted by end time, then arrival time.
        estimated: the jobs in service sorted by estimated end (start plus ``estimate``),
            each with its start and estimate in its slot, the waiting ones with their
            estimates (``Queues.s_start``, ``f_est``, the deque body's fourth field); the next
            completion is the first by true end over the slots.
        rows: the prefix rows (0: slots and picks).
        all_rows: every job in a row of its own, in arrival order, and ``select`` chooses
            the rows in service at every event (the rows are the buffer: no deques).
        max_buffer: the most entries a deque may have.
        pick: ``pick(q, s, needs, now) -> Pick`` (``None`` with rows).
        step: the policy's ``step(jobs, s, needs, state) -> (run, mark, state)``
            (``all_rows``).
        serve_needs: the needs in the first fit's order of the prefix rows.
        pairwise: the policy's step compares the rows pairwise (an order by a key: remaining
            work, Gittins rank; a reservation by estimated end times): a round costs the
            square of the rows (``all_rows``).
        estimate: the policy's ``estimate(size)``, kept per row (``all_rows``) or per job
            (``estimated``) from the job's arrival (``None``: none kept).
        classes: one deque per class, this many (``partitions``; 0: per need or one FIFO);
            a pick marks a job started on the helpers (``Pick.mark``), ``busy`` counts the
            servers of each class's partition in use, and each job in service keeps its wait
            in its slot, summed at its departure (the order in which the all-rows layout,
            which ran these policies before, sums them: the same sums bit for bit).
    """

    preemptive: bool = False
    per_need: bool = False
    registers: int = 1
    inside: bool = False
    sorted_slots: bool = False
    estimated: bool = False
    rows: int = 0
    all_rows: bool = False
    max_buffer: int = 1 << 24
    pick: Callable | None = None
    step: Callable | None = None
    serve_needs: tuple = ()
    pairwise: bool = False
    estimate: Callable | None = None
    classes: int = 0

    def deques(self, needs: tuple[int, ...]) -> int:
        return self.classes or (len(needs) if self.per_need else 1)

    @property
    def slot_waits(self) -> bool:
        """Each job in service keeps its wait in its slot, summed at its departure (the order
        in which the all-rows layout, which ran these policies before, sums them)."""
        return self.classes > 0


def needs_of(workload) -> tuple[int, ...]:
    """The workload's distinct needs, largest first."""
    return tuple(sorted({int(a) for a in workload.cores_array[:, 0]}, reverse=True))


def layout_of(policy: Policy, s: int, needs: tuple[int, ...], tied: bool = False) -> Layout:
    """The layout of ``policy`` on ``s`` servers and the distinct ``needs`` (largest first).
    ``tied``: given jobs whose arrival times tie (a replay of a log's whole seconds): a
    layout of several deques, per need or per class, whose picks compare the deques' fronts
    by arrival time cannot tell which of two jobs of equal times came first, nor can the
    slots sorted by estimated end tell which of two jobs of equal end and arrival times
    leaves first, so there every job is kept in a row, in the given order.

    Raises:
        NotImplementedError: facts this engine has no layout for.
    """
    layout = _layout(policy, s, needs)
    if tied and (layout.per_need or policy.partitions or policy.estimated_ends):
        return _rows(policy)
    return layout


def _rows(policy: Policy) -> Layout:
    """Every job in a row and the policy's ``step`` at every event."""
    order = policy.order
    return Layout(
        preemptive=policy.preemptive,
        all_rows=True,
        step=policy.step,
        pairwise=order in (Order.REMAINING_WORK, Order.GITTINS) or policy.reserves,
        estimate=policy.estimate if policy.estimates else None,
    )


def _layout(policy: Policy, s: int, needs: tuple[int, ...]) -> Layout:
    """The layout by the policy's facts, as the module docstring lists them."""
    order = policy.order
    if policy.partitions:  # (unbound: no partitions, a layout to size buffers)
        reserve = policy.reserve or ()
        pick = functools.partial(_picks.partitions, reserve, policy.helpers)
        return Layout(classes=len(reserve), pick=pick)
    if policy.estimated_ends:  # sorted by estimated end
        return _easy(estimated=True, estimate=policy.estimate)
    if policy.size_aware or policy.memory:
        return _rows(policy)
    if policy.prefix_servers:
        if order is Order.ARRIVAL:
            raise NotImplementedError(f"{policy.label}: prefix rows need a need order")
        rows = (s - 1) // min(needs) + 1  # the jobs before the prefix's last need < s
        return Layout(preemptive=True, rows=rows, serve_needs=order.needs(needs))
    if policy.preemptive:
        if not policy.backfills or policy.lookahead is not None or policy.reserves:
            raise NotImplementedError(f"{policy.label}: no event-engine layout")
        if order is Order.ARRIVAL:
            pick = _picks.by_arrival
        elif order is Order.MAX_WEIGHT:
            pick = _picks.by_weight
        elif order in (Order.MOST_SERVERS, Order.LEAST_SERVERS):
            pick = functools.partial(_picks.by_need, order)
        else:
            raise NotImplementedError(f"{policy.label}: no event-engine layout")
        return Layout(preemptive=True, per_need=True, pick=pick)
    if order is not Order.ARRIVAL:
        raise NotImplementedError(f"{policy.label}: a non-preemptive policy in need order")
    if not policy.backfills:
        return Layout(pick=_picks.front)
    if policy.reserves:  # sorted by end
        return _easy(sorted_slots=True)
    if policy.lookahead is not None:
        W = policy.lookahead
        return Layout(registers=W, pick=functools.partial(_picks.lookahead, W))
    return Layout(per_need=True, pick=_picks.fronts_by_arrival)


def _easy(**order) -> Layout:
    """EASY's layout: one FIFO whose first jobs sit in registers, the jobs in service in slots
    sorted by end (``order``), so that the reservation is a cumulative sum over the slots."""
    return Layout(
        registers=_picks.REGISTERS,
        inside=True,
        max_buffer=_PACKED_BUFFER,
        pick=_picks.easy,
        **order,
    )


def first_buffer(workload, layout: Layout, loads: int = 1) -> int:
    """Deque entries to start with. Most layouts touch one entry of a deque per event, so a
    round hardly costs more with more entries, while the replications that overflow go on
    alone, where a round costs its fixed overhead for a handful of them: four times the most
    jobs in service and 8 more, at least 64; with several ``loads`` side by side four times
    that (their highest load fills the deques most, and each growth compiles the kernel
    anew). A layout whose pick may pass over its FIFO body (``inside``): twice the most jobs
    in service and 8 more, at least 16. Rounded up to a power of 2. Every job in a row: twice
    the jobs in service when every server is busy on a job of the mean need and 8 more, at
    least 32; with a pairwise step (``pairwise``), those jobs and 8 more, at least 16 (a
    round costs the square of its rows, and a run at low load never holds most of them)."""
    most = workload.s // int(np.min(workload.cores_array[:, 0]))
    if layout.all_rows:
        busy = workload.s / float(np.dot(workload.probs, workload.cores_array[:, 0]))
        if layout.pairwise:  # a round costs the square of its rows
            return max(16, 1 << math.ceil(math.log2(busy + 8)))
        return max(32, 1 << math.ceil(math.log2(2 * (busy + 8))))
    if layout.inside:
        return max(16, 1 << math.ceil(math.log2(2 * (most + 8))))
    return max(64, 1 << math.ceil(math.log2(4 * (most + 8)))) * (4 if loads > 1 else 1)
