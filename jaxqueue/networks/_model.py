"""Networks of multi-server pools: the model and its validation (``bf-networks`` Sections 4-6)."""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float


def _row_tol(x) -> float:
    """Tolerance on routing row sums (a closed class must route with probability 1)."""
    return max(1e-9, 100 * float(np.finfo(np.asarray(x).dtype).eps))


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _normalise_queues(queues) -> tuple[tuple[tuple[int, ...], ...], ...]:
    if isinstance(queues, (str, bytes)) or not isinstance(queues, Sequence) or len(queues) == 0:
        raise ValueError("queues: expected a non-empty list of pools (lists of class server sets)")
    out = []
    for k, pool in enumerate(queues):
        if isinstance(pool, (str, bytes)) or not isinstance(pool, Sequence) or len(pool) == 0:
            raise ValueError(f"queues[{k}]: a pool must be a non-empty list of class server sets")
        sets = []
        for j, s in enumerate(pool):
            if isinstance(s, (str, bytes)) or not isinstance(s, Sequence) or len(s) == 0:
                raise ValueError(
                    f"queues[{k}][{j}]: a class server set must be a non-empty list of "
                    f"server indices, got {s!r}"
                )
            idx = []
            for v in s:
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                    raise ValueError(f"queues[{k}][{j}]: server index {v!r} is not an integer")
                idx.append(int(v))
            if len(set(idx)) != len(idx):
                raise ValueError(f"queues[{k}][{j}]: repeated server index in {idx}")
            sets.append(tuple(sorted(idx)))
        out.append(tuple(sets))
    return tuple(out)


def _reach(adj: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Boolean closure: nodes reachable from ``start`` along ``adj`` (start included)."""
    seen = start.copy()
    frontier = start.copy()
    while frontier.any():
        nxt = adj[frontier].any(axis=0) & ~seen
        seen |= nxt
        frontier = nxt
    return seen


class Network(eqx.Module):
    """A network of multi-server pools with random routing between classes.

    Each pool (queue) is a list of classes, each class a set of servers of that pool; server
    indices are global (``0 .. K-1``) and the pools' server sets are disjoint. Classes are
    numbered in order across pools. Jobs of class ``i`` are served at rate
    ``mu(S_{c_1} u ... u S_{c_l}) - mu(S_{c_1} u ... u S_{c_{l-1}})`` in position ``l`` of
    their pool (FCFS per server, parallel processing), then join class ``j`` with probability
    ``routing[i, j]`` (at the END of ``j``'s pool, also when it is the same pool) or leave with
    probability ``1 - sum_j routing[i, j]``.

    Without ``population`` every class is open (a class no arrival reaches has rate 0). With a
    ``population``, the classes reached by external arrivals (``nu``) are open and the others
    form the closed chain, which holds ``population`` jobs forever (``bf-networks`` Sections
    4-6).

    Args:
        queues: ``queues[k][j]`` lists the (global) servers of the ``j``-th class of pool ``k``.
        mu: service rate of each server, shape ``(K,)``, positive.
        routing: ``(C, C)`` substochastic matrix over classes.
        nu: external Poisson arrival rate per class, shape ``(C,)`` (default: zeros).
        population: number of jobs of the closed chain (``None`` for an open network).
        closed: optional flags of the closed classes (derived from ``routing`` and ``nu`` when
            omitted; required only when those are traced).

    Raises:
        ValueError: naming the field, for wrong shapes, negative or non-finite rates,
            overlapping server sets between pools, unused servers, routing rows summing to
            more than 1, open classes from which jobs never leave, closed classes leaking out
            of the chain, a reducible closed part, or a population without closed classes.
    """

    queues: tuple = eqx.field(static=True)
    mu: Float[Array, " K"]
    routing: Float[Array, "C C"]
    nu: Float[Array, " C"]
    population: int | None = eqx.field(static=True)
    closed: tuple = eqx.field(static=True)

    def __init__(self, queues, mu, routing, nu=None, population=None, *, closed=None):
        self.queues = _normalise_queues(queues)
        n_classes = sum(len(p) for p in self.queues)
        self.mu = jnp.asarray(mu)
        self.routing = jnp.asarray(routing)
        self.nu = jnp.zeros(n_classes, self.mu.dtype) if nu is None else jnp.asarray(nu)
        if population is not None:
            if isinstance(population, bool) or not isinstance(population, (int, np.integer)):
                raise ValueError(f"population: expected an integer, got {population!r}")
            population = int(population)
            if population < 1:
                raise ValueError(f"population: must be >= 1, got {population}")
        self.population = population
        self._check_shapes(n_classes)
        if closed is None:
            closed = self._derive_closed()
        closed = tuple(bool(c) for c in closed)
        if len(closed) != n_classes:
            raise ValueError(f"closed: expected {n_classes} flags, got {len(closed)}")
        self.closed = closed
        self._check_routing()

    # ---------------------------------------------------------------- structure
    @property
    def n_pools(self) -> int:
        return len(self.queues)

    @property
    def n_classes(self) -> int:
        return sum(len(p) for p in self.queues)

    @property
    def n_servers(self) -> int:
        return int(self.mu.shape[0])

    @property
    def server_sets(self) -> tuple[tuple[int, ...], ...]:
        """Server set of every class, in class order."""
        return tuple(s for pool in self.queues for s in pool)

    @property
    def class_pool(self) -> tuple[int, ...]:
        """Pool index of every class."""
        return tuple(k for k, pool in enumerate(self.queues) for _ in pool)

    @property
    def pool_classes(self) -> tuple[tuple[int, ...], ...]:
        """Class indices of every pool."""
        out, c = [], 0
        for pool in self.queues:
            out.append(tuple(range(c, c + len(pool))))
            c += len(pool)
        return tuple(out)

    @property
    def pool_servers(self) -> tuple[tuple[int, ...], ...]:
        """Sorted server indices of every pool."""
        return tuple(tuple(sorted({s for cls in pool for s in cls})) for pool in self.queues)

    @property
    def is_open(self) -> bool:
        return not any(self.closed)

    @property
    def kind(self) -> str:
        """``"open"``, ``"closed"`` or ``"mixed"``."""
        if not any(self.closed):
            return "open"
        return "closed" if all(self.closed) else "mixed"

    # ---------------------------------------------------------------- validation
    def _check_shapes(self, n_classes: int) -> None:
        if self.mu.ndim != 1 or self.mu.shape[0] == 0:
            raise ValueError(f"mu: expected a 1-D array of server rates, got shape {self.mu.shape}")
        K = self.mu.shape[0]
        owner: dict[int, int] = {}
        for k, pool in enumerate(self.queues):
            for j, s in enumerate(pool):
                for v in s:
                    if not 0 <= v < K:
                        raise ValueError(
                            f"queues[{k}][{j}]: server {v} out of range for {K} servers (mu)"
                        )
                    if owner.setdefault(v, k) != k:
                        raise ValueError(
                            f"queues: server {v} belongs to pools {owner[v]} and {k}; the pools' "
                            "server sets must be disjoint"
                        )
        if self.routing.shape != (n_classes, n_classes):
            raise ValueError(
                f"routing: expected shape ({n_classes}, {n_classes}) for {n_classes} classes, "
                f"got {self.routing.shape}"
            )
        if self.nu.shape != (n_classes,):
            raise ValueError(f"nu: expected shape ({n_classes},), got {self.nu.shape}")
        unused = sorted(set(range(K)) - set(owner))
        if unused:
            raise ValueError(f"mu: servers {unused} are used by no class (remove them from mu)")
        for name in ("mu", "routing", "nu"):
            x = getattr(self, name)
            if not _is_concrete(x):
                continue
            a = np.asarray(x)
            if not np.all(np.isfinite(a)):
                raise ValueError(f"{name}: contains non-finite values")
            if np.any(a < 0):
                raise ValueError(f"{name}: rates and probabilities must be >= 0, got min {a.min()}")
        if _is_concrete(self.mu) and np.any(np.asarray(self.mu) <= 0):
            bad = np.flatnonzero(np.asarray(self.mu) <= 0).tolist()
            raise ValueError(f"mu: server rates must be > 0 (servers {bad})")
        if _is_concrete(self.routing):
            rows = np.asarray(self.routing).sum(axis=1)
            bad = np.flatnonzero(rows > 1 + _row_tol(self.routing))
            if bad.size:
                i = int(bad[0])
                raise ValueError(
                    f"routing: row {i} sums to {rows[i]:.6g} > 1 (rows are the probabilities of "
                    f"the next class after a class-{i} service; 1 - sum is the exit probability)"
                )

    def _derive_closed(self) -> tuple[bool, ...]:
        if not (_is_concrete(self.routing) and _is_concrete(self.nu)):
            raise ValueError(
                "closed: routing/nu are traced; pass closed=(flags) to Network explicitly"
            )
        if self.population is None:
            return (False,) * self.n_classes  # open network: unvisited classes have lam = 0
        P = np.asarray(self.routing) > 0
        arrivals = np.asarray(self.nu) > 0
        open_ = _reach(P, arrivals)
        return tuple(bool(v) for v in ~open_)

    def _check_routing(self) -> None:
        closed = np.array(self.closed, bool)
        if self.population is None and closed.any():
            raise ValueError("closed: closed classes need a population")
        if not (_is_concrete(self.routing) and _is_concrete(self.nu)):
            return
        R = np.asarray(self.routing)
        nu = np.asarray(self.nu)
        if np.any(nu[closed] > 0):
            raise ValueError("nu: closed classes cannot have external arrivals")
        P = R > 0
        opn = ~closed
        if opn.any():
            if np.any(P[np.ix_(opn, closed)]):
                i, j = np.argwhere(P & opn[:, None] & closed[None, :])[0]
                raise ValueError(f"routing: open class {i} routes to closed class {j}")
            exits = (1.0 - R.sum(axis=1)) > _row_tol(R)
            can_leave = _reach(P.T, exits & opn) & opn
            stuck = np.flatnonzero(opn & ~can_leave)
            if stuck.size:
                raise ValueError(
                    f"routing: jobs never leave the open part: classes {stuck.tolist()} cannot "
                    "reach an exit (every open class needs a path to a row summing to < 1)"
                )
        if self.population is not None and not closed.any():
            raise ValueError(
                "population: given, but every class is reached by external arrivals (nu), so "
                "there is no closed chain"
            )
        if closed.any():
            rows = R.sum(axis=1)
            for i in np.flatnonzero(closed):
                if abs(rows[i] - 1.0) > _row_tol(R):
                    raise ValueError(
                        f"routing: closed class {i} has row sum {rows[i]:.6g}; a class of the "
                        "closed chain must route with probability 1"
                    )
                out = np.flatnonzero(P[i] & opn)
                if out.size:
                    raise ValueError(f"routing: closed class {i} routes to open class {out[0]}")
            idx = np.flatnonzero(closed)
            sub = P[np.ix_(idx, idx)]
            start = np.zeros(idx.size, bool)
            start[0] = True
            fwd, bwd = _reach(sub, start), _reach(sub.T, start)
            if not (fwd.all() and bwd.all()):
                comp = idx[fwd & bwd].tolist()
                raise ValueError(
                    f"routing: the closed part (classes {idx.tolist()}) is reducible (class "
                    f"{idx[0]} communicates only with {comp}); one closed chain with one "
                    "population is supported"
                )
