"""Kernels jitted per platform: XLA:CPU options on the CPU only (other backends reject them);
the wording of the run-time checks (``eqx.error_if``) of traced inputs; values materialised
once before their consumers (``settle``, within ``settling``: the event engine and the
policies it runs) and reductions over a short leading axis as trees of elementwise operations
(``rows_*``)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax


def jit_per_platform(fn: Callable, cpu_options: dict, **kw) -> Callable[[str], Callable]:
    """``fn`` jitted twice, with the XLA:CPU ``cpu_options`` for CPU devices and without for
    the other backends (``kw`` goes to both ``jax.jit`` calls). Returns
    ``for_platform(platform) -> jitted fn``, ``platform`` as in ``device.platform``."""
    on_cpu = jax.jit(fn, compiler_options=cpu_options, **kw)
    other = jax.jit(fn, **kw)
    return lambda platform: on_cpu if platform == "cpu" else other


def refused(message: str) -> str:
    """The message of a run-time check (``eqx.error_if``): under a plain ``jax.jit`` it ends
    XLA's long error, so its first words say whose refusal it is and how to see it plainly."""
    return (
        f"jaxqueue refused the input (under jax.jit this line ends XLA's long error; "
        f"eqx.filter_jit shows it without XLA's part): {message}"
    )


# the traced 1 of the engine run being traced (settle), scoped to the trace by `settling`
_UNIT: contextvars.ContextVar = contextvars.ContextVar("settle_unit", default=None)


@contextlib.contextmanager
def settling(one):
    """Within it, :func:`settle` materialises its values, with ``one``: an int32 scalar that
    is 1 at run time but not a constant to XLA (the engine passes ``min(n_jobs, 1)``)."""
    token = _UNIT.set(one)
    try:
        yield
    finally:
        _UNIT.reset(token)


def settle(*xs):
    """``xs`` computed once, before their consumers. XLA fuses a round's per-replication
    decisions (``(R,)`` masks, indices, values: tens of operations each) into every
    ``(slots, R)`` update that uses them and recomputes them for each element. An optimisation
    barrier is removed before fusion and a reduce of two copies is simplified away; a
    ``while_loop`` that runs once (its trip count ``one`` unknown to XLA) hands on materialised
    buffers for the price of one loop. Exact: the loop multiplies by 1. Outside
    :func:`settling`, the identity."""
    one = _UNIT.get()
    if one is None:
        return xs

    def once(c):
        k, xs = c
        return k + 1, jax.tree.map(lambda x: _times(x, one), xs)

    return lax.while_loop(lambda c: c[0] < one, once, (jnp.int32(0), xs))[1]


def _times(x, one):
    """``x`` times the traced 1 (for booleans: and with ``one > 0``; for floats a select on
    ``one > 0``: a float multiply flushes subnormals to zero on XLA:CPU, and the packed job
    info of a float32 deque body, bitcast, is subnormal for unmeasured jobs)."""
    if x.dtype == jnp.bool_:
        return x & (one > 0)
    if jnp.issubdtype(x.dtype, jnp.floating):
        return jnp.where(one > 0, x, jnp.zeros((), x.dtype))
    return x * one.astype(x.dtype)


def _rows(op, x, axis, settled):
    """Reduce ``axis`` (static, short) of ``x`` with the elementwise ``op``, as a balanced tree
    of row operations: one fused elementwise pass (XLA:CPU's own reduce over a short leading
    axis is slower, and is split over threads, which waits on a busy core). Exact for min,
    max and integer sums (the order does not matter). An elementwise tree is fused into each
    consumer and recomputed for every element it feeds: ``settled`` (default: more than 8
    rows) materialises the result first (:func:`settle`)."""
    rows = [lax.index_in_dim(x, i, axis, keepdims=False) for i in range(x.shape[axis])]
    while len(rows) > 1:
        pairs = [op(rows[i], rows[i + 1]) for i in range(0, len(rows) - 1, 2)]
        rows = pairs + rows[len(pairs) * 2 :]
    if settled is None:
        settled = x.shape[axis] > 8
    return settle(rows[0])[0] if settled else rows[0]


def rows_min(x, axis=0, settled=None):
    return _rows(jnp.minimum, x, axis, settled)


def rows_sum(x, axis=0, settled=None):
    return _rows(jnp.add, x, axis, settled)


def rows_max(x, axis=0, settled=None):
    return _rows(jnp.maximum, x, axis, settled)


def rows_any(x, axis=0, settled=None):
    return _rows(jnp.logical_or, x, axis, settled)
