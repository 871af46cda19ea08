"""The base of every structured pool: one set of names, one ``solve``, one ``sweep``.

Every structured pool (randomized assignment, server groups, nested, line, ring, homogeneous
line and ring) is a :class:`StructuredPool`:

* ``server_sets`` (a property, as the field of :class:`jaxqueue.pools.Pool`): the server set of
  each class of the equivalent generic pool, 0-based; ``num_classes``, ``K`` (servers) and
  ``capacity()`` (total capacity ``M``) go with it;
* the load is given the same way everywhere: ``rho``, the total arrival rate over the total
  capacity (the convention of both BF papers and of ``jaxqueue bf solve --rho``), or
  ``lam=``, the arrival rates (a number: the total rate, split as the structure says; or one
  rate per entry of the result: per class, or per type for the randomized pools);
* ``kernel(rho, *, lam=...)``: the jittable, vmappable solver, ``(BFResult, stable)``, no
  exception; ``solve(rho, *, lam=...)``: validated, raising ``ValueError`` for an unstable
  load and naming the bottleneck; ``sweep(rhos, *, lam=...)``: ``kernel`` vmapped over the
  leading axis; ``class_rates(rho)``: the rate of each class of the equivalent pool;
  ``to_pool()``: that generic :class:`jaxqueue.pools.Pool`.
"""

import abc
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from equinox import AbstractVar
from jaxtyping import Array

from .._result import BFResult
from ._common import check_rho, raise_if_unstable


class ServerSets(tuple):
    """The server sets of a pool's classes (a tuple of tuples of 0-based servers).

    Calling it, ``pool.server_sets()``, is the deprecated method form of the randomized and
    homogeneous pools: it returns what that method returned (``(sets, class_types)`` for the
    randomized pools, the list of sets for the homogeneous line and ring).
    """

    def __new__(cls, sets, legacy=None):
        self = super().__new__(cls, (tuple(int(k) for k in s) for s in sets))
        self._legacy = legacy
        return self

    def __call__(self):
        warnings.warn(
            "server_sets() is deprecated: server_sets is a property of every structured pool "
            "(class_types gives the type of each class)",
            DeprecationWarning,
            stacklevel=2,
        )
        return list(self) if self._legacy is None else self._legacy


class StructuredPool(eqx.Module):
    """Abstract base of the structured pools (see the module docstring for the convention).

    A subclass defines ``mu``, ``K``, ``server_sets``, :meth:`capacity`, :meth:`kernel` and
    :meth:`to_pool`, where its classes do not share the load equally :meth:`class_rates`, and
    where the bottleneck is more than the whole pool, :meth:`bottleneck`. The typed pools
    (:class:`jaxqueue.pools.TypedPool`) are one too.
    """

    mu: AbstractVar[Array]
    K: AbstractVar[int]
    server_sets: AbstractVar[tuple[tuple[int, ...], ...]]

    #: Whether the solver works on per-class rates (nested, line, ring): there a positional
    #: vector is the deprecated form ``solve(lam)``.
    per_class = False

    @property
    def num_classes(self) -> int:
        """Number of classes of the equivalent generic pool."""
        return len(self.server_sets)

    @property
    def num_servers(self) -> int:
        """Number of servers ``K`` (as :attr:`jaxqueue.pools.Pool.num_servers`)."""
        return self.K

    @abc.abstractmethod
    def capacity(self):
        """Total capacity ``M`` of the pool (the denominator of ``rho``)."""

    @abc.abstractmethod
    def kernel(self, rho=None, *, lam=None, with_servers: bool = False):
        """The jittable, vmappable solver at one load: ``(BFResult, stable)``, no exception."""

    def class_rates(self, rho) -> Array:
        """Arrival rate of each class of the equivalent pool at total load ``rho`` (split
        equally among the classes)."""
        n = self.num_classes
        return jnp.full((n,), rho * self.capacity() / n, self.mu.dtype)

    @abc.abstractmethod
    def to_pool(self):
        """The equivalent generic :class:`jaxqueue.pools.Pool` (use with :meth:`class_rates`)."""

    def bottleneck(self, rho, lam) -> str:
        """Why the concrete load (``rho`` or ``lam``) is unstable; here the whole pool is the
        bottleneck (``rho >= 1``)."""
        r = float(np.ravel(rho)[0]) if lam is None else float(self.total_load(lam))
        return (
            f"unstable: total load rho={r} >= 1; the bottleneck is the whole pool of "
            f"K={self.K} servers (stable iff rho < 1)"
        )

    def total_load(self, lam) -> Array:
        """``rho``: the total of the rates ``lam`` over the total capacity."""
        return jnp.sum(jnp.asarray(lam)) / self.capacity()

    def _loads(self, rho, lam, *, batched: bool):
        """``(rho, lam)`` checked: exactly one given, ``rho >= 0``, ``lam`` a total or one rate
        per entry of the result, finite and ``>= 0``; a positional vector on a per-class pool
        is the deprecated ``solve(lam)``."""
        if self.per_class and lam is None and np.ndim(rho) > batched:
            warnings.warn(
                f"{type(self).__name__}: pass per-class rates as lam=...; the first positional "
                "argument is the total load rho",
                DeprecationWarning,
                stacklevel=3,
            )
            rho, lam = None, rho
        if (rho is None) == (lam is None):
            raise ValueError("give exactly one of rho (total load) or lam= (arrival rates)")
        if lam is None:
            check_rho(rho)
            return rho, None
        lam = jnp.asarray(lam, self.mu.dtype)
        n = self.result_size()
        if lam.ndim > batched + 1 or (lam.ndim == batched + 1 and lam.shape[-1] != n):
            raise ValueError(
                f"lam must be a total rate or one rate per entry of the result ({n}), got shape "
                f"{lam.shape}"
            )
        check_rho(lam, "lam")
        return None, lam

    def result_size(self) -> int:
        """Number of entries of ``L`` and ``T`` (classes, or types for the randomized pools)."""
        return self.num_classes

    def solve(self, rho=None, *, lam=None, with_servers: bool = True) -> BFResult:
        """Metrics at total load ``rho`` or for the arrival rates ``lam``.

        Args:
            rho: total arrival rate over total capacity (:meth:`capacity`).
            lam: instead of ``rho``: the total arrival rate, or one rate per entry of the
                result (per class, or per type for the randomized pools).
            with_servers: also compute ``psi_server`` where it costs extra.

        Raises:
            ValueError: both or neither of ``rho`` and ``lam``, a negative or misshapen load,
                or an unstable one (names the bottleneck).
        """
        rho, lam = self._loads(rho, lam, batched=False)
        res, stable = self.kernel(rho, lam=lam, with_servers=with_servers)
        raise_if_unstable(stable, lambda i: self.bottleneck(rho, lam))
        return res

    def sweep(self, rho=None, *, lam=None) -> tuple[BFResult, Array]:
        """:meth:`kernel` vmapped over the loads ``rho`` ``(R,)`` or the rates ``lam``
        (``(R,)`` totals or ``(R, n)``): ``(BFResult batched, stable flags)``; unstable points
        carry ``psi = 0``, ``L = inf`` and ``stable = False`` (no exception)."""
        rho, lam = self._loads(rho, lam, batched=True)
        if lam is None:
            return jax.vmap(lambda r: self.kernel(r))(jnp.asarray(rho, self.mu.dtype))
        return jax.vmap(lambda x: self.kernel(lam=x))(lam)

    def _rho(self, rho, lam):
        """The total load of a kernel call (``rho`` as given, else from ``lam``)."""
        if (rho is None) == (lam is None):
            raise ValueError("give exactly one of rho (total load) or lam= (arrival rates)")
        return jnp.asarray(rho, self.mu.dtype) if lam is None else self.total_load(lam)

    def _lam(self, rho, lam):
        """The per-class rates of a kernel call: ``lam`` (a total is split equally among the
        classes) or :meth:`class_rates` of ``rho``; a positional vector is the deprecated
        ``kernel(lam)``."""
        if lam is None and np.ndim(rho) >= 1:
            rho, lam = self._loads(rho, None, batched=False)
        if (rho is None) == (lam is None):
            raise ValueError("give exactly one of rho (total load) or lam= (arrival rates)")
        if lam is None:
            return self.class_rates(rho)
        lam = jnp.asarray(lam, self.mu.dtype)
        return jnp.full((self.num_classes,), lam / self.num_classes) if lam.ndim == 0 else lam
