"""The deques and service slots of the event engine (:mod:`._queues`): pushes, takes, front
refills and the moves of the slots.

Each change touches one entry per replication: one gather or scatter on the deque body
(``(D, Q, R, width)`` flattened: an entry's fields side by side, one row), the front
registers following. A single FIFO with ``F > 1`` front registers either mirrors its first
``F`` entries in the body (a lookahead: :func:`_take_registered`) or keeps in the body only
the jobs behind them (a pick that may start any job: :func:`_take_inside`, whose body writes
run in :func:`_once`, a loop that runs where some replication needs it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...._jit import rows_sum, settle
from ._queues import Queues, decode, encode


def _deque_of(need, needs):
    """The per-need deque of ``need`` (``needs`` largest first; int32 throughout: Python ints
    are int64 under x64)."""
    i32 = jnp.int32
    return sum((jnp.where(need == v, i32(k), i32(0)) for k, v in enumerate(needs)), i32(0))


def _entry(q: Queues, d, r):
    """Entry number ``(R,)`` of entry ``r`` (ring index) of deque ``d`` in ``q.body``
    (``(D, Q, R, width)``: the fields of an entry side by side)."""
    R = q.free.shape[0]
    return (d * q.capacity + r) * R + jnp.arange(R, dtype=r.dtype)


def _read(q: Queues, d, r):
    """``(arr, rem, info)`` of entry ``r`` of deque ``d``, and its estimate where the deques
    keep them: one gather of a row per replication (``q.body`` seen as ``(D Q R, width)``)."""
    e = _entry(q, d, r)
    x = q.body.reshape(-1, q.width).at[e].get(mode="promise_in_bounds")
    return x[:, 0], x[:, 1], decode(x[:, 2]), *x[:, 3:].T


def _onehot(n: int, d):
    return jnp.arange(n, dtype=jnp.int32)[:, None] == d[None]


def _push(q: Queues, d, item, on, front=False, apart=False) -> Queues:
    """Add a job ``(arr, rem, info)`` (and its estimate where the deques keep them:
    ``q.f_est``) at the back (an arrival) or, where ``front`` (a mask or ``True``), at the
    front (a preempted job: older than every waiting job of its need) of deque ``d`` where
    ``on`` (one scatter; the front registers follow). ``apart``: the body holds only the jobs
    behind the front registers (:func:`_take_inside`), written where the job goes there
    (:func:`_once`)."""
    Q, D = q.capacity, q.head.shape[0]
    hit = _onehot(D, d) & on[None]
    head = rows_sum(jnp.where(hit, q.head, 0))
    size = rows_sum(jnp.where(hit, q.size, 0))
    r = jnp.where(front, (head - 1) % Q, (head + size) % Q)
    W = q.width
    e = jnp.where(on, _entry(q, d, r), q.body.shape[0] // W)  # past the end: dropped
    arr, rem, info, *est = item
    vals = jnp.stack([arr, rem, encode(info, arr.dtype), *est], axis=1)
    F = q.f_arr.shape[0]
    if apart:
        e = jnp.where(size >= F, e, q.body.shape[0] // W)
    e, vals, hit, r, size = settle(e, vals, hit, r, size)

    def write(body, e, vals):
        return body.reshape(-1, W).at[e].set(vals, mode="drop", unique_indices=True).reshape(-1)

    if apart:
        body = _once(jnp.any(on & (size >= F)), write, q.body, e, vals)
    else:
        body = write(q.body, e, vals)
    if q.f_est is not None:
        q = q._replace(f_est=jnp.where(_onehot(F, size) & on[None], vals[:, 3][None], q.f_est))
    if F > D:  # one FIFO whose first F entries are in the registers: row `size` if free
        new_front = _onehot(F, size) & on[None]
    else:
        new_front = hit & ((size == 0) | front)[None]
    return q._replace(
        body=body,
        head=jnp.where(hit & front, r[None], q.head),
        size=q.size + hit,
        f_arr=jnp.where(new_front, arr[None], q.f_arr),
        f_rem=jnp.where(new_front, rem[None], q.f_rem),
        f_info=jnp.where(new_front, info[None], q.f_info),
    )


def _take(q: Queues, d, p, on, inside: bool) -> tuple[Queues, tuple]:
    """Remove position ``p`` of deque ``d`` where ``on`` and return it; ``inside``: ``p`` may
    be past the front (one FIFO only, :func:`_take_inside`), else it is the front (from
    the registers), or with ``F > 1`` front registers (one FIFO) one of the first ``F``
    positions (:func:`_take_registered`). The new front is loaded by :func:`_refill` after
    every write of the round (a gather before a scatter of the same buffer made XLA copy the
    whole buffer)."""
    Q, D = q.capacity, q.head.shape[0]
    if q.f_arr.shape[0] > D and not inside:
        return _take_registered(q, p, on)
    hit = _onehot(D, d) & on[None]
    pick = lambda x: rows_sum(jnp.where(_onehot(D, d), x, 0))  # noqa: E731
    head = pick(q.head)
    if inside:
        return _take_inside(q, p, on)
    else:
        item = (pick(q.f_arr), pick(q.f_rem), pick(q.f_info))
    q = q._replace(head=jnp.where(hit, ((head + 1) % Q)[None], q.head), size=q.size - hit)
    return q, item


def _take_inside(q: Queues, p, on) -> tuple[Queues, tuple]:
    """:func:`_take` of any position ``p`` of a single FIFO whose first ``F`` waiting jobs
    are in the front registers and the rest in the body (``Layout.inside``: position
    ``k >= F`` is ring entry ``head + k``; the entries ``head .. head + F - 1`` are unused).
    A registered job: the rows behind it move one up (the last is loaded by :func:`_refill`)
    and the head one on. A job in the body (rare): the entries of positions ``F .. p - 1``
    move one entry on, and the head with them (:func:`_move_on`); the FIFO has no holes."""
    Q, F = q.capacity, q.f_arr.shape[0]
    rows = jnp.arange(F, dtype=jnp.int32)[:, None]
    at = lambda x: rows_sum(jnp.where(rows == p[None], x, 0), settled=False)  # noqa: E731
    regs = (q.f_arr, q.f_rem, q.f_info) + (() if q.f_est is None else (q.f_est,))
    item = tuple(at(x) for x in regs)  # (settled by _apply)
    reg, inside = on & (p < F), on & (p >= F)
    up = reg[None] & (rows[:-1] >= p[None])
    shift = lambda x: jnp.concatenate([jnp.where(up, x[1:], x[:-1]), x[-1:]])  # noqa: E731
    q2 = q._replace(f_arr=shift(q.f_arr), f_rem=shift(q.f_rem), f_info=shift(q.f_info))
    if q.f_est is not None:
        q2 = q2._replace(f_est=shift(q.f_est))
    body, got = _move_on(q, jnp.where(inside, p - F + 1, 0))
    item = tuple(jnp.where(inside, b, a) for a, b in zip(item, got, strict=True))
    head = jnp.where(on, (q.head[0] + 1) % Q, q.head[0])
    return q2._replace(body=body, head=head[None], size=q.size - on[None]), item


def _move_on(q: Queues, n):
    """Take position ``p = F + n - 1`` of the body of :func:`_take_inside` where ``n > 0``:
    its job, and the body with entries ``head + F - 1 .. head + p - 1`` moved one entry on,
    the last register's job written first (entry ``head + F - 1`` is then position ``F - 1``
    of the FIFO once the head moves on, which :func:`_refill` loads again), one entry per
    replication per step of a ``while_loop`` (``max(n)`` steps, none in most rounds; a
    ``lax.cond`` would copy the body in and out). Returns the body and the job (``(arr,
    rem, info)``, and its estimate where kept)."""
    Q, F, R, W = q.capacity, q.f_arr.shape[0], q.free.shape[0], q.width
    head = q.head[0]
    est = () if q.f_est is None else (q.f_est[-1],)
    last = jnp.stack([q.f_arr[-1], q.f_rem[-1], encode(q.f_info[-1], q.body.dtype), *est], -1)
    reps = jnp.arange(R, dtype=jnp.int32)
    past = q.body.shape[0] // W  # an entry past the end: the scatter drops it

    def step(c):
        k, body, item = c
        body = body.reshape(-1, W)
        # entry head + F - 1 + n - k takes that before it (the last register's, the last step)
        to = (head + F - 1 + n - k) % Q * R + reps
        get = lambda b, i: b.at[i].get(mode="promise_in_bounds")  # noqa: E731
        src, got = get(body, (to - R) % (Q * R)), get(body, to)
        src = jnp.where((k < n - 1)[:, None], src, last)
        item = jnp.where((k == 0)[:, None], got, item)
        to, src, item = settle(to, src, item)
        at = jnp.where(k < n, to, past)
        body = body.at[at].set(src, mode="drop", unique_indices=True).reshape(-1)
        return k + 1, body, item

    zero = jnp.zeros((R, W), q.body.dtype)
    k = jnp.zeros_like(n)
    _, body, x = lax.while_loop(lambda c: jnp.any(c[0] < n), step, (k, q.body, zero))
    return body, (x[:, 0], x[:, 1], decode(x[:, 2]), *x[:, 3:].T)


def _take_registered(q: Queues, p, on) -> tuple[Queues, tuple]:
    """:func:`_take` of position ``p < F`` of a single FIFO with ``F`` front registers (which
    mirror its first ``F`` entries; the body holds them all): the item from the registers;
    in the body the entries before ``p`` move one step back (a scatter of at most ``F - 1``
    entries, whose values are in the registers) and the head one step on, not a roll of the
    whole deque; the registers behind ``p`` move one row up (the last is loaded by
    :func:`_refill`)."""
    Q, F = q.capacity, q.f_arr.shape[0]
    rows = jnp.arange(F, dtype=jnp.int32)[:, None]
    item = tuple(rows_sum(jnp.where(rows == p[None], x, 0)) for x in (q.f_arr, q.f_rem, q.f_info))
    head = q.head[0]
    if F > 1:
        k = jnp.arange(F - 1, dtype=jnp.int32)[:, None]  # position k < p: ring entry head + k + 1
        e = _entry(q, 0, (head[None] + k + 1) % Q)
        e = jnp.where(on[None] & (k < p[None]), e, q.body.shape[0] // 3)  # past the end: dropped
        vals = jnp.stack([q.f_arr[:-1], q.f_rem[:-1], encode(q.f_info[:-1], q.f_arr.dtype)], -1)
        e, vals = settle(e, vals)
        body = q.body.reshape(-1, 3).at[e].set(vals, mode="drop", unique_indices=True)
        body = body.reshape(-1)
        up = on[None] & (rows[:-1] >= p[None])
        shift = lambda x: jnp.concatenate([jnp.where(up, x[1:], x[:-1]), x[-1:]])  # noqa: E731
        q = q._replace(body=body, f_arr=shift(q.f_arr), f_rem=shift(q.f_rem))
        q = q._replace(f_info=shift(q.f_info))
    q = q._replace(head=jnp.where(on, (head + 1) % Q, head)[None], size=q.size - on[None])
    return q, item


def _refill(q: Queues, d, on, apart=False) -> Queues:
    """Load the front registers of deque ``d`` from its body where ``on`` (one gather); with
    ``F > 1`` registers of one FIFO, the last (position ``F - 1``); ``apart`` (the body holds
    only the jobs behind the registers: :func:`_take_inside`) only where it has one, in a
    :func:`_once`."""
    F = q.f_arr.shape[0]
    if F > q.head.shape[0]:
        r = (q.head[0] + F - 1) % q.capacity

        def load(regs, r, on):
            nxt = _read(q, jnp.zeros_like(r), r)
            last = (jnp.arange(F)[:, None] == F - 1) & on[None]
            return tuple(jnp.where(last, x[None], f) for x, f in zip(nxt, regs, strict=True))

        regs = (q.f_arr, q.f_rem, q.f_info) + (() if q.f_est is None else (q.f_est,))
        if apart:
            on = on & (q.size[0] >= F)
            regs = _once(jnp.any(on), load, regs, r, on)
        else:
            regs = load(regs, r, on)
        q = q._replace(f_arr=regs[0], f_rem=regs[1], f_info=regs[2])
        return q if q.f_est is None else q._replace(f_est=regs[3])
    hit = _onehot(q.head.shape[0], d) & on[None]
    r = rows_sum(jnp.where(_onehot(q.head.shape[0], d), q.head, 0))
    nxt = _read(q, d, r)  # a gather, its index computed inside (a few operations)
    return q._replace(
        f_arr=jnp.where(hit, nxt[0][None], q.f_arr),
        f_rem=jnp.where(hit, nxt[1][None], q.f_rem),
        f_info=jnp.where(hit, nxt[2][None], q.f_info),
    )


def _once(c, f, x, *args):
    """``f(x, *args)`` if ``c``, else ``x``: a ``while_loop`` that runs once or not at all, for
    work on the deque body that few rounds need: XLA:CPU splits a gather or scatter on a large
    body over two threads (a thread hand-off every round), and a ``lax.cond`` copies the body
    into and out of its branches. ``args`` pass through the loop's counter (a
    select on it): else XLA hoists the work on them out of the loop."""

    def step(c):
        k, x = c
        fresh = jax.tree.map(lambda a: jnp.where(k == 0, a, jnp.zeros_like(a)), args)
        return k + 1, f(x, *fresh)

    n = c.astype(jnp.int32)
    return lax.while_loop(lambda c: c[0] < n, step, (jnp.int32(0), x))[1]


def _vacate(q: Queues, i, on, sorted_slots: bool) -> Queues:
    """The job in service in slot ``i`` leaves where ``on``: its slot empties, or with
    ``sorted_slots`` (``Layout.sorted_slots``, ``Layout.estimated``) the rows after it move
    one up and the last row empties (the per-slot estimate and start with them, where kept)."""
    rows = jnp.arange(q.s_end.shape[0], dtype=jnp.int32)[:, None]
    if not sorted_slots:
        gone = (rows == i[None]) & on[None]
        return q._replace(
            s_end=jnp.where(gone, jnp.inf, q.s_end), s_info=jnp.where(gone, 0, q.s_info)
        )
    up = (rows >= i[None]) & on[None]

    def shift(x, empty):
        return jnp.where(up, jnp.concatenate([x[1:], jnp.full_like(x[:1], empty)]), x)

    q = q._replace(
        s_end=shift(q.s_end, jnp.inf), s_arr=shift(q.s_arr, 0), s_info=shift(q.s_info, 0)
    )
    if q.s_start is None:
        return q
    return q._replace(s_start=shift(q.s_start, jnp.inf), s_est=shift(q.s_est, 0))


def _occupy(q: Queues, slot, job, on, sorted_slots: bool, wait=None, more=None) -> Queues:
    """Job ``(end, arrival, info)`` into service in slot ``slot`` where ``on``: an empty
    one, or with ``sorted_slots`` its row in the order, the rows from it on one down (the
    last is empty: the job fits); ``wait``: its wait, kept in the slot (``Queues.s_wait``);
    ``more``: other per-slot fields of the job, by name (``s_est``, ``s_start``)."""
    end, arr, info = job
    rows = jnp.arange(q.s_end.shape[0], dtype=jnp.int32)[:, None]
    at = (rows == slot[None]) & on[None]
    down = (rows > slot[None]) & on[None] if sorted_slots else jnp.zeros((), bool)

    def put(x, new):
        return jnp.where(at, new[None], jnp.where(down, jnp.concatenate([x[:1], x[:-1]]), x))

    q = q._replace(s_end=put(q.s_end, end), s_arr=put(q.s_arr, arr), s_info=put(q.s_info, info))
    if more:
        q = q._replace(**{k: put(getattr(q, k), v) for k, v in more.items()})
    return q if wait is None else q._replace(s_wait=put(q.s_wait, wait))
