"""Balance function, balanced-fairness rates and the stationary law on a box of states."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence

import numpy as np

from ._pool import Pool
from ._recursion import solve


def _box_shape(pool: Pool, box) -> tuple[int, ...]:
    if np.ndim(box) == 0:
        box = [int(box)] * pool.num_classes
    box = tuple(int(b) for b in box)
    if len(box) != pool.num_classes or any(b < 0 for b in box):
        raise ValueError(
            f"box must give a maximum count >= 0 for each of the {pool.num_classes} classes, "
            f"got {box}"
        )
    size = math.prod(b + 1 for b in box)
    if size > 5_000_000:
        raise ValueError(f"box has {size:,} states (limit 5,000,000): use a smaller box")
    return tuple(b + 1 for b in box)


def _capacity_of_active(pool: Pool, active: np.ndarray) -> np.ndarray:
    """``M(union of K_i over active classes)`` for each row of a boolean ``(n, I)`` matrix."""
    inc = pool.incidence.astype(np.float64)
    covered = (active.astype(np.float64) @ inc) > 0
    return covered @ np.asarray(pool.mu, dtype=np.float64)


def balance_function(pool: Pool, box) -> np.ndarray:
    """The balance function ``Phi(x)`` on the box ``0 <= x_i <= box[i]``.

    Recursion (``bf-clusters`` eq. (4), ``bf-recursive`` eq. (1))::

        Phi(0) = 1,   Phi(x) = sum_{i: x_i > 0} Phi(x - e_i) / M(union_{i: x_i > 0} K_i),

    evaluated level by level in ``|x|`` (vectorised numpy, float64).

    Args:
        pool: the pool.
        box: one maximum count per class (or one integer for all classes).

    Returns:
        numpy array of shape ``(box[0] + 1, ..., box[I-1] + 1)``.

    Raises:
        ValueError: malformed box or more than 5 million states.
    """
    shape = _box_shape(pool, box)
    I = pool.num_classes
    X = np.indices(shape).reshape(I, -1).T  # (N, I), C order: flat index = ravel of x
    strides = np.array([math.prod(shape[j + 1 :]) for j in range(I)], dtype=np.int64)
    cap = _capacity_of_active(pool, X > 0)
    total = X.sum(1)
    phi = np.zeros(X.shape[0])
    phi[0] = 1.0
    for n in range(1, int(total.max()) + 1):
        rows = np.flatnonzero(total == n)
        acc = np.zeros(rows.size)
        for i in range(I):
            ok = X[rows, i] > 0
            acc[ok] += phi[rows[ok] - strides[i]]
        phi[rows] = acc / cap[rows]
    return phi.reshape(shape)


def bf_rates(pool: Pool, box) -> np.ndarray:
    """Balanced-fairness service rates ``phi_i(x) = Phi(x - e_i) / Phi(x)`` (eq. (7) of
    ``bf-clusters``), ``0`` when ``x_i = 0``, on the box. Shape ``box_shape + (I,)``.

    Their sum over active classes is ``M(union of K_i)`` (every busy server is fully used).
    """
    phi = balance_function(pool, box)
    I = pool.num_classes
    rates = np.zeros(phi.shape + (I,))
    for i in range(I):
        sl_hi = [slice(None)] * I
        sl_lo = [slice(None)] * I
        sl_hi[i] = slice(1, None)
        sl_lo[i] = slice(None, -1)
        rates[tuple(sl_hi) + (i,)] = phi[tuple(sl_lo)] / phi[tuple(sl_hi)]
    return rates


@dataclasses.dataclass(frozen=True)
class BoxLaw:
    """The stationary law restricted to a box.

    Attributes:
        pi: ``pi(x) = psi Phi(x) lam^x`` on the box (exact normalisation, not renormalised).
        outside: ``1 - sum(pi)``, the stationary mass outside the box (truncation mass).
        psi: the exact empty probability used.
    """

    pi: np.ndarray
    outside: float
    psi: float


def stationary_box(pool: Pool, lam, box, *, psi: float | None = None) -> BoxLaw:
    """Stationary distribution ``pi(x) = psi Phi(x) lam^x`` (``bf-recursive`` eq. (2)) on a box.

    ``psi`` defaults to the exact value from :func:`jaxqueue.pools.solve`; pass it for pools
    solved otherwise (structured pools).

    Raises:
        ValueError: unstable or malformed rates, malformed box.
    """
    lam = np.asarray(pool.rates(lam), dtype=np.float64)
    if psi is None:
        psi = float(solve(pool, lam, class_idle=False).psi)
    phi = balance_function(pool, box)
    X = np.indices(phi.shape)
    with np.errstate(divide="ignore"):
        loglam = np.where(lam > 0, np.log(np.where(lam > 0, lam, 1.0)), -np.inf)
    logw = sum(np.where(X[i] > 0, X[i] * loglam[i], 0.0) for i in range(pool.num_classes))
    pi = psi * phi * np.exp(logw)
    return BoxLaw(pi=pi, outside=float(max(0.0, 1.0 - pi.sum())), psi=float(psi))


def detailed_measure(pool: Pool, seq: Sequence[int], lam=None) -> float:
    """Order-independent stationary measure of a detailed queue state ``c = (c_1, ..., c_n)``
    (``bf-clusters`` eq. (1), ``bf-recursive`` eq. (3)), with ``pi(empty) = 1``::

        pi(c) = prod_p lam_{c_p} / M(K_{c_1} u ... u K_{c_p}).

    With ``lam=None`` the arrival factors are 1, so summing over the orderings of ``x`` gives
    ``Phi(x)`` (Proposition 1; see :func:`aggregate_detailed_measure`).
    """
    mu = np.asarray(pool.mu, dtype=np.float64)
    lam = None if lam is None else np.asarray(pool.rates(lam), dtype=np.float64)
    covered: set[int] = set()
    out = 1.0
    for c in seq:
        if not 0 <= int(c) < pool.num_classes:
            raise ValueError(f"seq holds class {c} outside [0, {pool.num_classes})")
        covered.update(pool.server_sets[int(c)])
        out *= (1.0 if lam is None else lam[int(c)]) / mu[sorted(covered)].sum()
    return out


def aggregate_detailed_measure(pool: Pool, x: Sequence[int], lam=None) -> float:
    """``sum_{c : |c| = x} pi(c)`` by enumerating every distinct ordering (tiny ``x`` only).

    Equals ``Phi(x) lam^x`` (Proposition 1 of ``bf-recursive``).

    Raises:
        ValueError: more than 9 jobs.
    """
    x = [int(v) for v in x]
    if len(x) != pool.num_classes or any(v < 0 for v in x):
        raise ValueError(f"x must hold {pool.num_classes} counts >= 0, got {x}")
    n = sum(x)
    if math.factorial(n) > 10**6:
        raise ValueError(f"{n} jobs: too many orderings to enumerate (at most 9 jobs)")
    multiset = [i for i, v in enumerate(x) for _ in range(v)]
    return float(sum(detailed_measure(pool, c, lam) for c in set(itertools.permutations(multiset))))
