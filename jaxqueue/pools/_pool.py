"""The ``Pool`` model: job classes, the servers each class may use, and server capacities."""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float


def _is_concrete(x) -> bool:
    """True when ``x`` holds values now (not a tracer inside jit / grad / vmap)."""
    return not isinstance(x, jax.core.Tracer)


def _normalise_sets(server_sets, name: str = "server_sets") -> tuple[tuple[int, ...], ...]:
    what = name.split("_")[0]
    if isinstance(server_sets, (str, bytes)) or not isinstance(server_sets, Sequence):
        raise ValueError(
            f"{name} must be a sequence of sequences of {what} indices (0-based), "
            f"got {type(server_sets).__name__}"
        )
    out = []
    for i, s in enumerate(server_sets):
        try:
            items = [int(k) for k in s]
        except (TypeError, ValueError):
            raise ValueError(
                f"{name}[{i}] must be a sequence of integer {what} indices, got {s!r}"
            ) from None
        if any(int(k) != k for k in s):
            raise ValueError(f"{name}[{i}] must hold integers, got {s!r}")
        out.append(tuple(items))
    return tuple(out)


class Pool(eqx.Module):
    """A resource pool under balanced fairness (``bf-recursive`` Section 2.1).

    Class ``i`` may be served by the servers ``server_sets[i]`` (0-based indices); server ``k``
    has capacity ``mu[k]``. The assignment graph (``server_sets``) is static Python data; the
    capacities ``mu`` are an array (differentiable).

    Args:
        server_sets: one sequence of 0-based server indices per job class.
        mu: server capacities, shape ``(K,)``, all ``> 0``.

    Raises:
        ValueError: a class with no server, a server index out of ``[0, K)``, a repeated server
            in one class, no class at all, or capacities that are not finite and ``> 0``.

    Examples:
        >>> pool = Pool([[0, 2], [1, 2]], [1.0, 1.0, 1.0])  # the M model
        >>> pool.num_classes, pool.num_servers
        (2, 3)
    """

    server_sets: tuple[tuple[int, ...], ...] = eqx.field(static=True, converter=_normalise_sets)
    mu: Float[Array, " K"] = eqx.field(converter=jnp.asarray)

    def __check_init__(self):
        if len(self.server_sets) == 0:
            raise ValueError("server_sets: a pool needs at least one job class")
        if self.mu.ndim != 1 or self.mu.shape[0] == 0:
            raise ValueError(f"mu must be a non-empty 1-d array of capacities, got {self.mu.shape}")
        if not jnp.issubdtype(self.mu.dtype, jnp.floating):
            raise ValueError(f"mu must be a floating array, got dtype {self.mu.dtype}")
        K = self.mu.shape[0]
        for i, s in enumerate(self.server_sets):
            if len(s) == 0:
                raise ValueError(f"server_sets[{i}] is empty: class {i} has no server")
            bad = [k for k in s if not 0 <= k < K]
            if bad:
                raise ValueError(
                    f"server_sets[{i}] has server indices {bad} outside [0, {K}) "
                    f"(0-based; mu has {K} servers)"
                )
            if len(set(s)) != len(s):
                raise ValueError(f"server_sets[{i}] repeats a server: {list(s)}")
        if _is_concrete(self.mu):
            mu = np.asarray(self.mu)
            bad = np.flatnonzero(~(np.isfinite(mu) & (mu > 0)))
            if bad.size:
                raise ValueError(
                    f"mu must be finite and > 0; servers {bad.tolist()} (0-based) have "
                    f"{mu[bad].tolist()}"
                )

    @classmethod
    def from_incidence(cls, incidence, mu) -> Pool:
        """Build a pool from a 0/1 (or boolean) matrix of shape ``(classes, servers)``.

        Raises:
            ValueError: the matrix is not 2-d, not 0/1, or its width differs from ``len(mu)``.
        """
        a = np.asarray(incidence)
        if a.ndim != 2:
            raise ValueError(f"incidence must be a 2-d (classes x servers) matrix, got {a.shape}")
        if not np.all((a == 0) | (a == 1)):
            raise ValueError("incidence must contain only 0/1 (or booleans)")
        if np.ndim(mu) != 1 or np.shape(mu)[0] != a.shape[1]:
            raise ValueError(
                f"incidence has {a.shape[1]} server columns but mu has shape {np.shape(mu)}"
            )
        return cls([np.flatnonzero(row).tolist() for row in a], mu)

    @property
    def num_classes(self) -> int:
        """Number of job classes ``I``."""
        return len(self.server_sets)

    @property
    def num_servers(self) -> int:
        """Number of servers ``K``."""
        return int(self.mu.shape[0])

    @property
    def incidence(self) -> np.ndarray:
        """Boolean ``(I, K)`` numpy matrix: true iff server ``k`` serves class ``i``."""
        a = np.zeros((self.num_classes, self.num_servers), dtype=bool)
        for i, s in enumerate(self.server_sets):
            a[i, list(s)] = True
        return a

    @property
    def class_masks(self) -> np.ndarray:
        """Bit masks (numpy int64) of the server sets: bit ``k`` set iff class uses server ``k``.

        Raises:
            ValueError: more than 62 servers (masks would not fit an int64).
        """
        if self.num_servers > 62:
            raise ValueError(f"class_masks needs K <= 62 servers, got K={self.num_servers}")
        return np.array([sum(1 << k for k in s) for s in self.server_sets], dtype=np.int64)

    def rates(self, lam, *, name: str = "lam") -> Array:
        """Validate a vector of arrival rates for this pool and return it as an array.

        Checks the shape ``(..., I)`` always, and (when ``lam`` holds values, not a tracer)
        that the rates are finite and ``>= 0``.

        Raises:
            ValueError: wrong length, negative or non-finite rates.
        """
        arr = jnp.asarray(lam)
        if not jnp.issubdtype(arr.dtype, jnp.floating):
            arr = arr.astype(jnp.result_type(float))
        if arr.ndim < 1 or arr.shape[-1] != self.num_classes:
            raise ValueError(
                f"{name} must have length I={self.num_classes} (one rate per class), "
                f"got shape {arr.shape}"
            )
        if _is_concrete(arr):
            a = np.asarray(arr)
            bad = np.flatnonzero(np.any(~(np.isfinite(a) & (a >= 0)).reshape(-1, a.shape[-1]), 0))
            if bad.size:
                raise ValueError(
                    f"{name} must be finite and >= 0; classes {bad.tolist()} (0-based) are not"
                )
        return arr


def m_model_pool(asymmetric: bool = False, dtype=None) -> Pool:
    """The M model of ``bf-clusters`` Section 5 / ``bf-recursive`` Figure 1.

    Symmetric: servers 1, 2, 3 (paper numbering) of capacity 1, class 1 -> {1, 3},
    class 2 -> {2, 3}; 0-based ``[[0, 2], [1, 2]]``. Asymmetric (``mu = (1, 0, 1)`` in the paper):
    the capacity-0 server is dropped, leaving 2 servers, class 1 -> {server 1, server 3},
    class 2 -> {server 3}; 0-based ``[[0, 1], [1]]`` with ``mu = (1, 1)``.
    """
    dt = dtype or jnp.result_type(float)
    if asymmetric:
        return Pool([[0, 1], [1]], jnp.ones(2, dt))
    return Pool([[0, 2], [1, 2]], jnp.ones(3, dt))


PRESETS = {
    "m-model-sym": lambda: m_model_pool(False),
    "m-model-asym": lambda: m_model_pool(True),
}


def preset_pool(name: str) -> Pool:
    """A named pool: ``m-model-sym`` or ``m-model-asym``.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    if name not in PRESETS:
        raise ValueError(f"unknown pool preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]()
