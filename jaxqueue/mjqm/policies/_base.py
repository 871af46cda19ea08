"""The job-list policy layer: jobs in arrival order and the choice of the set in service.

A policy is an immutable ``eqx.Module``. Its definition is ``select(jobs, s, needs) -> run``
on the whole job list in arrival order (:class:`Jobs`, slots on axis 0): a boolean mask with
``sum(need[run]) <= s``; non-preemptive policies keep ``jobs.run``, preemptive ones choose
afresh (preempt-resume). Beside it a policy declares, as typed class attributes, the facts an
engine needs to run it without calling ``select`` at every event (as diffrax's
``AbstractSolver.term_structure``): whether it preempts, its first fit's scan
:class:`Order`, whether it backfills (starts a job behind a waiting one that does not fit),
how far it looks (``lookahead``), whether backfilled jobs must end by the head's reservation
(``reserves``, EASY) and whether it serves only within the shortest arrival-order prefix
whose needs reach ``s`` (``prefix_servers``, server-filling), whether it reads each job's size
(``size_aware``: then the engine keeps every job's size and remaining work and runs
``select`` itself at every event, unless it reserves by estimated ends: ``estimated_ends``)
or a state of its own (``memory``: ``step``), and whether each class starts on servers of
its own or on shared helpers (``partitions``, balanced-splitting: its ``reserve`` and
``helpers``). Every engine derives its own state layout from these facts
(``jaxqueue.mjqm.engines.events``); a policy holds no layout.

A new policy is one new file in this folder with its ``select`` and its facts (and its
stability limit in closed form, where one is known), its name registered in ``__init__``.
"""

from __future__ import annotations

import abc
import enum
from typing import ClassVar, NamedTuple

import equinox as eqx
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float, Int

from ..._jit import rows_sum, settle

__all__ = [
    "Jobs",
    "Order",
    "Policy",
    "PreemptiveByOrder",
    "first_fit",
    "fit_by_need",
    "fcfs_start",
    "weight_rank",
    "in_key_order",
    "positions",
    "cumsum",
    "first_slot",
    "at_slot",
]


def positions(x: Array) -> Array:
    """Slot numbers ``0 .. B - 1`` shaped to broadcast against ``x`` (slots on axis 0)."""
    return jnp.arange(x.shape[0]).reshape((-1,) + (1,) * (x.ndim - 1))


def cumsum(x: Array) -> Array:
    """Cumulative sum over the slots (axis 0): unrolled for up to 128 slots (one fused pass;
    ``jnp.cumsum`` lowers to a quadratic window reduction on the CPU), a parallel prefix
    beyond."""
    if x.shape[0] > 128:
        return lax.associative_scan(jnp.add, x, axis=0)
    rows = [x[0]]
    for i in range(1, x.shape[0]):  # unrolled: XLA fuses the chain into one pass
        rows.append(rows[-1] + x[i])
    return jnp.stack(rows)


def first_slot(mask: Array) -> Array:
    """The first slot where ``mask`` holds (``B`` where it never does); a min, not an argmin
    (cheaper on the CPU)."""
    return jnp.min(jnp.where(mask, positions(mask), mask.shape[0]), axis=0)


def at_slot(x: Array, j: Array) -> Array:
    """``x`` at slot ``j`` (0 where ``j`` is out of range)."""
    return jnp.sum(jnp.where(positions(x) == j, x, jnp.zeros((), x.dtype)), axis=0)


class Jobs(NamedTuple):
    """The jobs in the system, slot ``i < count`` holding the ``i``-th oldest job. Arrays have
    the slots on axis 0 and, in the engine, the replications on axis 1 (``count`` then has
    the replication axis only); policies reduce over axis 0 and broadcast the rest.

    Attributes:
        cls: class.
        need: servers asked.
        rem: remaining work (service still owed).
        age: time since arrival.
        wait: age at the first start (valid where ``started``).
        started: has been in service.
        run: in service now (never in a slot ``>= count``: ``free`` and the non-preemptive
            policies read it as given).
        count: number of jobs in the system.
        size: service time drawn at arrival (``None`` where the engine keeps no sizes; the
            size-aware policies need it).
        mark: a bit the policy keeps per job (its :meth:`Policy.step`; balanced-splitting:
            runs on the helper servers), ``None`` where unused.
        estimate: :meth:`Policy.estimate` of each job's size, computed once at its arrival
            (``None`` where the engine keeps none: the policy computes it from ``size``).
    """

    cls: Int[Array, " B ..."]
    need: Int[Array, " B ..."]
    rem: Float[Array, " B ..."]
    age: Float[Array, " B ..."]
    wait: Float[Array, " B ..."]
    started: Bool[Array, " B ..."]
    run: Bool[Array, " B ..."]
    count: Int[Array, "..."]
    size: Float[Array, " B ..."] | None = None
    mark: Bool[Array, " B ..."] | None = None
    estimate: Float[Array, " B ..."] | None = None

    @property
    def live(self) -> Bool[Array, " B ..."]:
        return positions(self.need) < self.count

    @property
    def waiting(self) -> Bool[Array, " B ..."]:
        return self.live & ~self.run

    def free(self, s: int) -> Int[Array, "..."]:
        return s - jnp.sum(jnp.where(self.run, self.need, 0), axis=0).astype(self.need.dtype)


class Order(enum.Enum):
    """The scan order of a policy's first fit: which job goes first."""

    ARRIVAL = "arrival"  # oldest first
    MOST_SERVERS = "most-servers"  # largest need first, arrival order within a need
    LEAST_SERVERS = "least-servers"  # smallest need first, arrival order within a need
    MAX_WEIGHT = "max-weight"  # needs by weight c_n x floor(s / n), arrival order within a need
    REMAINING_WORK = "remaining-work"  # least remaining work (time x need) first
    GITTINS = "gittins"  # lowest Gittins rank of the class law at attained service first

    def needs(self, needs: tuple[int, ...]) -> tuple[int, ...] | None:
        """The distinct needs in scan order (``needs``: largest first), or ``None`` for
        arrival order (the ``by_need`` argument of :func:`first_fit`)."""
        if self in (Order.ARRIVAL, Order.REMAINING_WORK, Order.GITTINS):
            return None
        if self is Order.MAX_WEIGHT:  # the order changes with the counts; ties: larger first
            return tuple(needs)
        return tuple(needs) if self is Order.MOST_SERVERS else tuple(reversed(needs))


class Policy(eqx.Module):
    """A scheduling policy on the list of jobs (module docstring).

    Class attributes: ``name`` (as on the command line), ``preemptive``, ``clairvoyant``
    (uses the service times of waiting jobs), ``recurrence`` (has a form on the ordered
    workload vector, ``mjsre`` eq. (2)), ``job_list`` (defined by ``select`` on the job
    list, so the event engine runs it), ``saturation_limit`` (its stability limit is the
    throughput of the saturated system); the engine facts ``order``, ``backfills``,
    ``lookahead``, ``reserves``, ``prefix_servers``, ``size_aware``, ``memory``,
    ``estimates``, ``estimated_ends``, ``partitions`` (module docstring)."""

    name: ClassVar[str] = ""
    preemptive: ClassVar[bool] = False
    clairvoyant: ClassVar[bool] = False
    recurrence: ClassVar[bool] = False
    job_list: ClassVar[bool] = True  # defined on the job list (select): the event engine runs it
    saturation_limit: ClassVar[bool] = False
    order: ClassVar[Order] = Order.ARRIVAL
    backfills: ClassVar[bool] = False  # may start a job behind a waiting one that does not fit
    lookahead: ClassVar[int | None] = None  # only the first W waiting jobs may start (None: all)
    reserves: ClassVar[bool] = False  # a job behind the head must end by the head's reservation
    prefix_servers: ClassVar[bool] = False  # serves only within the shortest arrival-order
    # prefix whose needs reach s: at most (s - 1) // min(need) + 1 jobs
    size_aware: ClassVar[bool] = False  # reads each job's size (Jobs.size) and remaining work
    memory: ClassVar[bool] = False  # decides from a state it keeps between events (step)
    estimates: ClassVar[bool] = False  # plans with estimate(size) of each job (kept from its
    # arrival)
    estimated_ends: ClassVar[bool] = False  # EASY's reservation on the estimated ends (start
    # plus estimate(size)) of the jobs in service; a later job backfills if its estimate fits
    partitions: ClassVar[bool] = False  # class c starts on its own reserve[c] servers or on
    # the shared helpers, each in arrival order up to its first job that does not fit

    @property
    def label(self) -> str:
        """The name with its parameter, as on the command line."""
        return self.name

    @abc.abstractmethod
    def select(self, jobs: Jobs, s: int, needs: tuple[int, ...]) -> Bool[Array, " B"]:
        """The jobs in service after an event; ``needs``: the workload's distinct needs,
        largest first (static)."""

    def step(self, jobs: Jobs, s: int, needs, state):
        """``(run, mark, state)`` after an event for a policy with ``memory``: the set in
        service, the per-job bits (``Jobs.mark``) and the per-replication int32 ``state`` it
        keeps (0 at the start). Without memory: ``select``, the marks and state unchanged."""
        return self.select(jobs, s, needs), jobs.mark, state

    def estimate(self, size):
        """The run time a policy that ``estimates`` plans with for a job of ``size``
        (``Jobs.estimate``; the engine computes it once, at the job's arrival)."""
        raise NotImplementedError

    def closed_form_limit(self, workload) -> float | None:
        """The stability limit of this policy on ``workload`` in closed form, where one is
        known (``None`` otherwise)."""
        return None

    def bind(self, workload) -> Policy:
        """This policy with what it reads from ``workload`` (the class laws of
        ``server-filling-gittins``); most policies read nothing and return themselves."""
        return self


class IntegerParameter(Policy):
    """A policy with one integer parameter, its field named ``parameter`` (at least
    ``least``), written ``NAME:VALUE`` on the command line (``window:W``, ``msfq:L``)."""

    parameter: ClassVar[str] = ""
    least: ClassVar[int] = 0

    def __check_init__(self):
        p, value = self.parameter, getattr(self, self.parameter)
        if not (isinstance(value, int) and value >= self.least):
            raise ValueError(
                f"policy {self.name}:{p} needs an integer {p} >= {self.least}, got {value!r}"
            )

    @property
    def label(self) -> str:
        return f"{self.name}:{getattr(self, self.parameter)}"


class PreemptiveByOrder(Policy):
    """Preemptive first fit in the class's :class:`Order`: at every event all jobs in the
    system are scanned in that order and every one that fits is served (preempt-resume).
    The shared ``select`` of ``preemptive-first-fit``, ``msf`` and ``least-servers-first``."""

    preemptive = True
    backfills = True

    def select(self, jobs: Jobs, s: int, needs):
        return first_fit(jobs.live, jobs.need, s, by_need=self.order.needs(needs))


def _cumulative(left, need, by_need, rank=None):
    """Cumulative need of the ``left`` jobs in the scan order: arrival order, or with
    ``by_need`` (the distinct needs, largest first) largest need first and arrival order within
    a need (a cumulative sum per need: no sort); with ``rank`` (one per need of ``by_need``,
    distinct, per replication) the needs in increasing rank instead."""
    x = jnp.where(left, need, 0)
    if by_need is None:
        return cumsum(x)
    if rank is not None:
        sums = [cumsum(jnp.where(need == v, x, 0)) for v in by_need]
        cum = jnp.zeros_like(x)
        for k, v in enumerate(by_need):
            ahead = sum(jnp.where(rank[j] < rank[k], sums[j][-1], 0) for j in range(len(by_need)))
            cum = jnp.where(need == v, ahead + sums[k], cum)
        return cum
    cum, offset = jnp.zeros_like(x), 0
    for v in by_need:
        cs = cumsum(jnp.where(need == v, x, 0))
        cum = jnp.where(need == v, offset + cs, cum)
        offset = offset + cs[-1]
    return cum


def first_fit(
    candidates: Bool[Array, " B"],
    need: Int[Array, " B"],
    free: Int[Array, ""],
    by_need: tuple[int, ...] | None = None,
    window: int | None = None,
    rank=None,
    needs: tuple[int, ...] | None = None,
) -> Bool[Array, " B"]:
    """Start candidates in scan order (arrival order; with ``by_need``, the distinct needs
    largest first, largest need first and arrival order within a need; with ``rank`` too, the
    needs in increasing ``rank[k]``, per replication), each that fits in what is left of
    ``free`` servers (first fit). With ``window = W`` (arrival order) only the
    first ``W`` candidates not yet started may start, and the window slides as they do
    (``W = 1`` stops at the first that does not fit).

    With ``by_need`` (no ``rank``), or in arrival order with ``needs`` (every need of the
    candidates), computed in closed form from the candidates of each need ahead of each job
    (:func:`fit_by_need`, :func:`first_fit_counted`). Otherwise a run at a time: candidates
    that do not fit in the free servers are dropped (the free count only decreases), the
    longest prefix (in scan order) of those left whose cumulative need fits starts at once,
    and the scan goes on while some candidate fits; each round starts at least one job."""
    if window is not None:
        return _window_fit(candidates, need, free, window)
    if rank is None and (by_need or needs):
        ahead = lambda x: cumsum(x) - x  # noqa: E731  (the candidates before, arrival order)
        counts = counts_ahead(ahead, candidates, need, by_need or needs)
        if by_need:
            return fit_by_need(candidates, need, free, by_need, counts)
        return first_fit_counted(candidates, need, free, needs, counts)

    def run(c):
        chosen, left, free = c
        left = left & (need <= free)  # a job that does not fit now never will
        take = left & (_cumulative(left, need, by_need, rank) <= free)
        free = free - jnp.sum(jnp.where(take, need, 0), axis=0).astype(free.dtype)
        return chosen | take, left & ~take, free

    def more(c):
        _, left, free = c
        return jnp.any(left & (need <= free))

    free = jnp.broadcast_to(jnp.asarray(free, need.dtype), need.shape[1:])
    return lax.while_loop(more, run, (jnp.zeros_like(candidates), candidates, free))[0]


def _window_fit(candidates, need, free, W):
    """First fit over a sliding window of the first ``W`` candidates not started: one pick per
    round (the oldest candidate in the window that fits)."""
    pos = positions(need)

    def pick(c):
        chosen, free, _ = c
        left = candidates & ~chosen
        ok = left & (need <= free) & (cumsum(left.astype(jnp.int32)) <= W)
        hit = pos == first_slot(ok)
        free = free - jnp.sum(jnp.where(hit, need, 0), axis=0).astype(free.dtype)
        return chosen | hit, free, jnp.any(hit)

    free = jnp.broadcast_to(jnp.asarray(free, need.dtype), need.shape[1:])
    init = (jnp.zeros_like(candidates), free, jnp.asarray(True))
    return lax.while_loop(lambda c: c[2], pick, init)[0]


def weight_rank(live, need, s: int, needs: tuple[int, ...]):
    """MaxWeight's order of the needs: the rank of need ``needs[k]`` (0 first) by weight
    ``c_n x floor(s / n)`` (``c_n`` jobs of need ``n`` in the system), larger weight first, a
    larger need first on equal weights; ``(K, ...)``."""
    w = [jnp.sum(live & (need == v), axis=0) * (s // v) for v in needs]
    K = len(needs)
    ranks = [
        sum(
            ((w[j] > w[k]) | ((w[j] == w[k]) & (j < k))).astype(jnp.int32)
            for j in range(K)
            if j != k
        )
        + jnp.zeros_like(w[k], jnp.int32)
        for k in range(K)
    ]
    return jnp.stack(ranks)


def in_key_order(key, live, need, rule):
    """``rule(live, need, before)`` (a mask) applied to the live jobs in increasing ``key``
    (ties in arrival order), the mask given in arrival order. Up to ``_PAIRWISE`` slots the
    order is a pairwise comparison of the slots (no sort): ``before(x)`` is the sum of ``x``
    (zero off the live jobs) over the jobs ahead of each in that order. Beyond, the live jobs
    are sorted by ``key`` (the jobs not live last), ``before`` is ``None`` (the slots are in
    that order) and the mask is sorted back."""
    B = need.shape[0]
    if B <= _PAIRWISE:
        j = positions(need)

        def before(x):
            total = jnp.zeros_like(x)
            for i in range(B):  # unrolled: one fused pass over the slots per term
                ahead = live[i] & ((key[i] < key) | ((key[i] == key) & (i < j)))
                total = total + jnp.where(ahead, x[i], jnp.zeros((), x.dtype))
            return settle(total)[0]  # its consumers would each recompute the B terms

        return rule(live, need, before)
    pos = jnp.broadcast_to(positions(need).astype(jnp.int32), need.shape)
    k = jnp.where(live, key, jnp.inf)
    _, p, n, alive = lax.sort((k, pos, need, live.astype(jnp.int32)), dimension=0, num_keys=2)
    take = rule(alive > 0, n, None).astype(jnp.int32)
    return lax.sort((p, take), dimension=0, num_keys=1)[1] > 0


_PAIRWISE = 128  # slots up to which in_key_order compares pairs (B^2 work) rather than sorts


def counts_ahead(before, live, need, needs):
    """Per need ``v`` of ``needs`` (every need of the live jobs), the live jobs of need ``v``
    ahead of each job (``before`` of :func:`in_key_order`). At most ``B - 1`` each: packed
    ``31 // bits`` needs to an int32, one ``before`` per pack."""
    bits = max(1, (need.shape[0] - 1).bit_length())
    per, out = 31 // bits, []
    for g in range(0, len(needs), per):
        group = needs[g : g + per]
        packed = before(
            sum(jnp.where(live & (need == v), 1 << (bits * i), 0) for i, v in enumerate(group))
        )
        out += [(packed >> (bits * i)) & ((1 << bits) - 1) for i in range(len(group))]
    return out


def fit_by_need(candidates, need, free, by_need, counts):
    """:func:`first_fit` a need at a time in the order of ``by_need`` (every need of the
    candidates), ``counts`` the candidates of each need ahead of each job: within a need the
    first ``free // v`` start."""
    free = jnp.broadcast_to(jnp.asarray(free, need.dtype), need.shape[1:])
    chosen = jnp.zeros_like(candidates)
    for v, c in zip(by_need, counts, strict=True):
        mine = candidates & (need == v)
        k = free // v
        chosen = chosen | (mine & (c < k[None]))
        free = free - v * jnp.minimum(jnp.sum(mine, axis=0, dtype=need.dtype), k)
    return chosen


def first_fit_counted(candidates, need, free, needs, counts):
    """:func:`first_fit` in a key order given by ``counts`` (:func:`counts_ahead` of the
    candidates, per need of ``needs``), without a loop. The free servers only fall along the
    scan, so the jobs of need ``v`` it starts are the first ``m_v`` candidates of that need,
    those met while at least ``v`` servers are free. Largest need first, ``m_v`` counts the
    candidates of need ``v`` where that holds with the larger needs' starts capped at their
    ``m`` and every smaller need's candidate ahead started (each fits while ``v`` do)."""
    free = jnp.broadcast_to(jnp.asarray(free, need.dtype), need.shape[1:])
    by_size = sorted(range(len(needs)), key=lambda k: -needs[k])
    chosen, used = jnp.zeros_like(candidates), jnp.zeros_like(need)
    for i, k in enumerate(by_size):
        v = needs[k]
        # servers left ahead of each job: ``used`` by the larger needs, all of the rest
        ahead = used + sum(needs[j] * counts[j] for j in by_size[i:])
        fits = candidates & (need == v) & (ahead + v <= free[None])
        m = rows_sum(fits.astype(need.dtype), settled=True)  # each job's ``used`` reads it
        chosen = chosen | fits
        used = used + v * jnp.minimum(counts[k], m[None])
    return chosen


class ByRemainingWork(Policy):
    """Preemptive, size-aware: the jobs in the system in increasing remaining work (remaining
    service time x servers needed; arrival order on ties), served by the class's ``fit(live,
    need, s, needs)`` applied in that order. The shared ``select`` of ``first-fit-srpt`` and
    ``server-filling-srpt``."""

    preemptive = True
    clairvoyant = True
    backfills = True
    size_aware = True
    order = Order.REMAINING_WORK

    def fit(self, live, need, s: int, needs, before):
        """The mask of the jobs served, given the live jobs, their needs and ``before``
        (:func:`in_key_order`: their order)."""
        raise NotImplementedError

    def select(self, jobs: Jobs, s: int, needs):
        rule = lambda live, need, before: self.fit(live, need, s, needs, before)  # noqa: E731
        return in_key_order(jobs.rem * jobs.need, jobs.live, jobs.need, rule)


def fcfs_start(jobs: Jobs, s: int) -> Bool[Array, " B"]:
    """FCFS from ``jobs.run``: waiting jobs start in arrival order while the oldest waiting one
    fits (the cumulative need of the waiting jobs, in order, within the free servers)."""
    waiting = jobs.waiting
    return jobs.run | (waiting & (cumsum(jnp.where(waiting, jobs.need, 0)) <= jobs.free(s)))
