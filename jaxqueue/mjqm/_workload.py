"""The workload model of the multiserver-job queue (``mjsre`` Sections 4.1, 9.1, 9.2).

A :class:`Workload` holds everything about the job stream except the arrival *rate*: the
servers (one pool of ``s`` identical servers, or a vector of resource types), the job classes
(cores per resource type, optional number of *specific* servers, probability, service law) and
the *shape* of the inter-arrival law (Poisson when ``arrival`` is ``None``). The rate ``lam`` is
an argument of every simulator so that it can be swept, vmapped or differentiated.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..dist import Exponential, Law

__all__ = ["Workload"]


def _as_servers(servers) -> tuple[int, ...]:
    arr = np.atleast_1d(np.asarray(servers))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"servers must be an int or a 1-D vector of ints, got {servers!r}")
    if not np.all(arr == np.round(arr)) or np.any(arr < 1):
        raise ValueError(f"servers must be positive integers, got {servers!r}")
    return tuple(int(v) for v in arr)


def _as_cores(cores, n_types: int) -> tuple[tuple[int, ...], ...]:
    arr = np.asarray(cores)
    if arr.ndim == 1 and n_types == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[1] != n_types or arr.shape[0] == 0:
        raise ValueError(
            f"cores must have shape (classes,) or (classes, {n_types}) for {n_types} resource "
            f"type(s), got shape {arr.shape}"
        )
    if not np.all(arr == np.round(arr)) or np.any(arr < 0):
        raise ValueError(f"cores must be non-negative integers, got {cores!r}")
    return tuple(tuple(int(v) for v in row) for row in arr)


class Workload(eqx.Module):
    """Servers, job classes and the arrival shape of a multiserver-job queue (MJQM).

    Job ``n`` belongs to class ``c`` with probability ``probs[c]``, asks for ``cores[c]``
    servers (per resource type) and, optionally, ``specific[c]`` additional *specific* servers
    drawn uniformly at random (Section 9.1, eq. (14)), and holds them all for a service time
    drawn from ``services[c]``. Inter-arrival times are i.i.d. with the law ``arrival`` rescaled
    to mean ``1 / lam`` (Poisson arrivals when ``arrival`` is ``None``).

    Args:
        servers: ``s`` (an int) or the vector ``(s^1, ..., s^T)`` of Section 9.2.
        cores: ``(classes,)`` ints in ``[1, s]``, or ``(classes, T)`` ints with
            ``0 <= cores[c, t] <= servers[t]`` and at least one positive entry per class.
        probs: ``(classes,)`` class probabilities, summing to 1.
        services: one law of :mod:`jaxqueue.dist` per class (with a fixed-uniform transform,
            i.e. ``n_uniforms`` not ``None``: exponential, Erlang-k, hyperexponential, bounded
            Pareto, deterministic, empirical).
        arrival: law of the inter-arrival times up to scale (any mean; it is rescaled to
            ``1 / lam``); ``None`` means Poisson arrivals.
        specific: optional ``(classes,)`` ints, the number ``beta`` of specific servers per
            class (single resource type only), with ``cores[c] + specific[c] <= s``.
        name: a label (scenario name).

    Raises:
        ValueError: naming the field, for cores > servers, probabilities not summing to 1,
            a service law that is not a ``Law`` (or has no fixed-uniform transform), etc.

    Examples:
        >>> from jaxqueue.dist import Exponential
        >>> w = Workload(20, [1, 10], [0.9, 0.1], [Exponential(1.0), Exponential(2.0)])
        >>> float(w.lambda_ideal())  # s / E[alpha sigma] = 20 / (0.9 + 2.0)
        6.896551724137931
    """

    servers: tuple[int, ...] = eqx.field(static=True)
    cores: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    probs: Float[Array, " classes"]
    services: tuple[Law, ...]
    arrival: Law | None
    specific: tuple[int, ...] | None = eqx.field(static=True)
    name: str = eqx.field(static=True)

    def __init__(
        self,
        servers: int | Sequence[int],
        cores,
        probs,
        services: Sequence[Law],
        arrival: Law | None = None,
        *,
        specific: Sequence[int] | None = None,
        name: str = "",
    ):
        self.servers = _as_servers(servers)
        self.cores = _as_cores(cores, len(self.servers))
        self.probs = jnp.asarray(probs) if not isinstance(probs, jax.Array) else probs
        if isinstance(services, Law):
            services = [services] * len(self.cores)
        self.services = tuple(services)
        self.arrival = arrival
        self.specific = None if specific is None else tuple(int(b) for b in np.asarray(specific))
        self.name = str(name)

    def __check_init__(self):
        n = len(self.cores)
        s = np.asarray(self.servers)
        c = np.asarray(self.cores)
        if np.any(c.sum(axis=1) == 0):
            raise ValueError("cores: every class must ask for at least one server")
        over = np.nonzero(np.any(c > s[None, :], axis=1))[0]
        if over.size:
            raise ValueError(
                f"cores: class {int(over[0])} asks for {c[over[0]].tolist()} servers but the "
                f"system has {list(self.servers)}"
            )
        if not isinstance(self.probs, jax.core.Tracer):
            p = np.asarray(self.probs, dtype=float)
            if p.shape != (n,):
                raise ValueError(f"probs must have shape ({n},) (one per class), got {p.shape}")
            if (
                not np.all(np.isfinite(p))
                or np.any(p < 0)
                or not math.isclose(p.sum(), 1.0, abs_tol=1e-6)
            ):
                raise ValueError(f"probs must be >= 0 and sum to 1, got sum {p.sum()!r}")
        if len(self.services) != n:
            raise ValueError(f"services: need one law per class ({n}), got {len(self.services)}")
        for i, law in enumerate(self.services):
            if not isinstance(law, Law):
                raise ValueError(f"services[{i}] must be a jaxqueue.dist law, got {law!r}")
            if law.n_uniforms is None:
                raise ValueError(
                    f"services[{i}] ({type(law).__name__}) has no fixed-uniform transform; the "
                    "MJQM simulators need one (exp, erlang, hyperexp, bpareto, det, empirical)"
                )
        if self.arrival is not None:
            if not isinstance(self.arrival, Law) or self.arrival.n_uniforms is None:
                raise ValueError(
                    f"arrival must be None (Poisson) or a law with a fixed-uniform transform, "
                    f"got {self.arrival!r}"
                )
        if self.specific is not None:
            if len(self.servers) != 1:
                raise ValueError("specific servers are only defined for one resource type")
            b = np.asarray(self.specific)
            if b.shape != (n,) or np.any(b < 0):
                raise ValueError(f"specific must be ({n},) non-negative ints, got {self.specific}")
            if np.any(c[:, 0] + b > s[0]):
                raise ValueError("specific: cores + specific servers exceed the servers")

    def unnamed(self) -> Workload:
        """The same workload without its name: what the kernels are jitted on (a static field,
        the name would key a trace and a compilation of its own)."""
        return dataclasses.replace(self, name="") if self.name else self

    # ------------------------------------------------------------------ shape information
    @property
    def n_classes(self) -> int:
        return len(self.cores)

    @property
    def n_types(self) -> int:
        """Number of resource types T (1 for the plain MJQM)."""
        return len(self.servers)

    @property
    def s(self) -> int:
        """Total number of servers (``s`` for one resource type)."""
        return int(sum(self.servers))

    @property
    def cores_array(self) -> np.ndarray:
        """``(classes, T)`` int array of cores per resource type (plus specific servers)."""
        c = np.asarray(self.cores, dtype=np.int32)
        if self.specific is not None:
            c = c + np.asarray(self.specific, dtype=np.int32)[:, None]
        return c

    @property
    def is_poisson(self) -> bool:
        return self.arrival is None or isinstance(self.arrival, Exponential)

    def arrival_shape(self) -> Law:
        """The inter-arrival law rescaled to mean 1 (exponential for Poisson arrivals)."""
        law = Exponential(1.0) if self.arrival is None else self.arrival
        return law.with_mean(1.0)

    # ------------------------------------------------------------------ moments
    def mean_service(self) -> Float[Array, " classes"]:
        """``E[sigma | class c]`` for every class."""
        return jnp.stack([jnp.asarray(law.mean()) for law in self.services])

    def mean_work(self) -> Float[Array, " T"]:
        """``E[alpha sigma]`` per resource type: mean server-time a job brings (per type)."""
        w = jnp.asarray(self.probs) * self.mean_service()
        return jnp.asarray(self.cores_array.T, dtype=w.dtype) @ w

    def lambda_ideal(self) -> Float[Array, ""]:
        """Stability limit without HOL blocking: ``min_t s_t / E[alpha_t sigma]``.

        ``mjsre`` Section 7.5 (``lambda_ideal = s / sum_i sigma_i alpha_i p_i``);
        an upper bound of the true limit ``lambda_c`` of eq. (5).
        """
        work = self.mean_work()
        s = jnp.asarray(self.servers, dtype=work.dtype)
        ratio = jnp.where(work > 0, s / jnp.where(work > 0, work, 1.0), jnp.inf)
        return jnp.min(ratio)

    def idle_servers_expected(self, lam) -> Float[Array, " T"]:
        """Mean number of idle servers per type, ``s_t - lam E[alpha_t sigma]`` (stable loads)."""
        work = self.mean_work()
        return jnp.asarray(self.servers, dtype=work.dtype) - lam * work
