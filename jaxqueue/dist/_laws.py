"""Service-time and inter-arrival laws.

Every law is an immutable ``eqx.Module`` with

* ``mean()``, ``var()``, ``scv()`` (squared coefficient of variation) as JAX scalars;
* ``sample(key, shape=(), dtype=None)``: keyed sampling, reparameterised in the scale so that
  ``jax.grad`` flows through the law's continuous parameters (pathwise derivatives);
* ``scaled(c)``: the law of ``c * X`` (used to set a mean, a rate or a server speed-up);
* ``n_uniforms`` and ``from_uniforms(u)``: where a law is an explicit transform of a fixed
  number of independent U(0, 1) variables (``u.shape[-1] == n_uniforms``), simulators can draw
  the uniforms from counter-based keys themselves and stay independent of chunking.
  Laws without such a transform (phase counts up to hundreds) set ``n_uniforms = None``.

Sources: ``mjsre`` Section 8 and Table 2 (exponential, Erlang-k, 2-phase
hyperexponential, bounded Pareto); ``bf-clusters`` Section 5 (bimodal and Zipf
numbers of exponential phases, hyperexponential) with ``docs/errata.md`` item 2.
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

__all__ = [
    "Law",
    "Exponential",
    "Erlang",
    "HyperExponential",
    "BoundedPareto",
    "Deterministic",
    "Empirical",
    "PhaseCount",
    "Coxian",
    "bimodal_phases",
    "zipf_phases",
]


def _positive(name: str, value) -> None:
    if not _is_concrete(value):
        return  # a traced value (jit, grad) was checked where it was made
    arr = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")


def _probabilities(name: str, value) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D vector, got shape {arr.shape}")
    if np.any(arr < 0) or not np.isclose(arr.sum(), 1.0, atol=1e-6):
        raise ValueError(f"{name} must be >= 0 and sum to 1, got sum {arr.sum()!r}")
    return arr


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _uniform_open(key, shape, dtype):
    """U(0, 1) excluding 0, so that log(u) is finite."""
    return jax.random.uniform(key, shape, dtype=dtype, minval=jnp.finfo(dtype).tiny, maxval=1.0)


def _float_dtype(dtype):
    return jnp.dtype(dtype) if dtype is not None else jnp.result_type(float)


class Law(eqx.Module):
    """Base class of a law of a positive random variable (a size or an inter-arrival time)."""

    n_uniforms = None  # number of U(0,1] inputs of from_uniforms, None if no such transform

    @abc.abstractmethod
    def mean(self) -> Float[Array, ""]: ...

    @abc.abstractmethod
    def var(self) -> Float[Array, ""]: ...

    def scv(self) -> Float[Array, ""]:
        """Squared coefficient of variation Var[X] / E[X]^2."""
        return self.var() / self.mean() ** 2

    def std(self) -> Float[Array, ""]:
        return jnp.sqrt(self.var())

    @abc.abstractmethod
    def scaled(self, c: ArrayLike) -> Law:
        """The law of ``c * X``."""

    def with_mean(self, m: ArrayLike) -> Law:
        """The same shape, rescaled to mean ``m``."""
        return self.scaled(jnp.asarray(m) / self.mean())

    def from_uniforms(self, u: Float[Array, "... n"]) -> Float[Array, "..."]:
        """Transform ``n_uniforms`` independent U(0, 1] variables (last axis) into a sample."""
        raise TypeError(f"{type(self).__name__} has no fixed-uniform transform; use sample()")

    def phase_form(self) -> tuple[Array, Array]:
        """``(alpha, T)``: the law as the absorption time of a CTMC started in ``alpha`` with
        sub-generator ``T`` (a phase-type law), differentiable in the law's parameters.

        Raises:
            ValueError: for a law that is not phase-type.
        """
        raise ValueError(f"{type(self).__name__} is not a phase-type law (no phase form)")

    def sample(self, key: PRNGKeyArray, shape: tuple[int, ...] = (), dtype=None) -> Array:
        """Draw ``shape`` independent samples with ``key``."""
        dtype = _float_dtype(dtype)
        u = _uniform_open(key, (*shape, self.n_uniforms), dtype)
        return self.from_uniforms(u).astype(dtype)


class Exponential(Law):
    """Exponential law of mean ``mean_``; ``from_uniforms``: ``-mean * log(u)``."""

    mean_: Float[ArrayLike, ""]
    n_uniforms = 1

    def __check_init__(self):
        _positive("Exponential mean", self.mean_)

    def mean(self):
        return jnp.asarray(self.mean_)

    def var(self):
        return jnp.asarray(self.mean_) ** 2

    def scaled(self, c):
        return Exponential(self.mean_ * c)

    def phase_form(self):
        rate = 1.0 / jnp.asarray(self.mean_)
        return jnp.ones(1, rate.dtype), -rate.reshape(1, 1)

    def from_uniforms(self, u):
        return -self.mean_ * jnp.log(u[..., 0])


class Erlang(Law):
    """Erlang-k law (sum of k exponential phases) of mean ``mean_``; scv = 1/k."""

    k: int = eqx.field(static=True)
    mean_: Float[ArrayLike, ""]

    def __check_init__(self):
        if not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"Erlang k must be a positive integer, got {self.k!r}")
        _positive("Erlang mean", self.mean_)

    @property
    def n_uniforms(self):  # type: ignore[override]
        return self.k

    def mean(self):
        return jnp.asarray(self.mean_)

    def var(self):
        return jnp.asarray(self.mean_) ** 2 / self.k

    def scaled(self, c):
        return Erlang(self.k, self.mean_ * c)

    def phase_form(self):
        rate = self.k / jnp.asarray(self.mean_)
        eye = jnp.eye(self.k, dtype=rate.dtype)
        return eye[0], rate * (jnp.eye(self.k, k=1, dtype=rate.dtype) - eye)

    def from_uniforms(self, u):
        return -(self.mean_ / self.k) * jnp.sum(jnp.log(u), axis=-1)


class HyperExponential(Law):
    """Mixture of exponentials: mean ``means[j]`` with probability ``probs[j]``.

    ``from_uniforms`` uses two uniforms: one picks the phase, one the exponential.
    """

    means: Float[ArrayLike, " phases"]
    probs: Float[ArrayLike, " phases"]
    n_uniforms = 2

    def __check_init__(self):
        _positive("HyperExponential means", self.means)
        if _is_concrete(self.probs):
            p = _probabilities("HyperExponential probs", self.probs)
            if np.shape(self.means) != p.shape:
                raise ValueError("HyperExponential means and probs must have the same length")

    def mean(self):
        return jnp.sum(jnp.asarray(self.probs) * jnp.asarray(self.means))

    def var(self):
        m2 = jnp.sum(jnp.asarray(self.probs) * 2.0 * jnp.asarray(self.means) ** 2)
        return m2 - self.mean() ** 2

    def scaled(self, c):
        return HyperExponential(jnp.asarray(self.means) * c, self.probs)

    def phase_form(self):
        rates = 1.0 / jnp.asarray(self.means)
        return jnp.asarray(self.probs, rates.dtype), -jnp.diag(rates)

    def from_uniforms(self, u):
        cdf = jnp.cumsum(jnp.asarray(self.probs))
        phase = jnp.sum(u[..., 0:1] > cdf[:-1], axis=-1)
        return -jnp.asarray(self.means)[phase] * jnp.log(u[..., 1])


class BoundedPareto(Law):
    """Bounded Pareto law on [xmin, xmax] with tail index ``shape``.

    Density ``a xmin^a x^(-a-1) / (1 - (xmin/xmax)^a)``; sampled by inverting the CDF.
    """

    xmin: Float[ArrayLike, ""]
    xmax: Float[ArrayLike, ""]
    shape: Float[ArrayLike, ""]
    n_uniforms = 1

    def __check_init__(self):
        if all(_is_concrete(v) for v in (self.xmin, self.xmax, self.shape)):
            _positive("BoundedPareto xmin", self.xmin)
            _positive("BoundedPareto shape", self.shape)
            if not float(self.xmax) > float(self.xmin):
                raise ValueError(f"BoundedPareto needs xmax > xmin, got {self.xmax}, {self.xmin}")

    def _moment(self, n):
        a, lo, hi = (jnp.asarray(v) for v in (self.shape, self.xmin, self.xmax))
        norm = 1.0 - (lo / hi) ** a
        # E[X^n] = a lo^a / norm * int_lo^hi x^(n-a-1) dx  (a != n)
        return a * lo**a / norm * (hi ** (n - a) - lo ** (n - a)) / (n - a)

    def mean(self):
        return self._moment(1)

    def var(self):
        return self._moment(2) - self._moment(1) ** 2

    def scaled(self, c):
        return BoundedPareto(self.xmin * c, self.xmax * c, self.shape)

    def from_uniforms(self, u):
        a, lo, hi = (jnp.asarray(v) for v in (self.shape, self.xmin, self.xmax))
        r = (lo / hi) ** a
        # F(x) = (1 - (lo/x)^a) / (1 - r)  =>  x = lo * (1 - v (1 - r))^(-1/a), v = 1 - u
        return lo * (r + u[..., 0] * (1.0 - r)) ** (-1.0 / a)


class Deterministic(Law):
    """A constant ``value``."""

    value: Float[ArrayLike, ""]
    n_uniforms = 0

    def __check_init__(self):
        _positive("Deterministic value", self.value)

    def mean(self):
        return jnp.asarray(self.value)

    def var(self):
        return jnp.zeros_like(jnp.asarray(self.value, dtype=float))

    def scaled(self, c):
        return Deterministic(self.value * c)

    def from_uniforms(self, u):
        return jnp.broadcast_to(jnp.asarray(self.value, dtype=u.dtype), u.shape[:-1])


class Empirical(Law):
    """Uniform resampling of a trace of observed values (an empirical law)."""

    values: Float[ArrayLike, " n"]
    n_uniforms = 1

    def __check_init__(self):
        if _is_concrete(self.values):
            v = np.asarray(self.values, dtype=float)
            if v.ndim != 1 or v.size == 0:
                raise ValueError("Empirical values must be a non-empty 1-D trace")
            _positive("Empirical values", v)

    def mean(self):
        return jnp.mean(jnp.asarray(self.values))

    def var(self):
        return jnp.var(jnp.asarray(self.values))

    def scaled(self, c):
        return Empirical(jnp.asarray(self.values) * c)

    def from_uniforms(self, u):
        v = jnp.asarray(self.values)
        idx = jnp.minimum((u[..., 0] * v.shape[0]).astype(jnp.int32), v.shape[0] - 1)
        return v[idx]


class PhaseCount(Law):
    """Sum of N i.i.d. exponential phases of mean ``phase_mean``, N = counts[j] w.p. probs[j].

    ``bf-clusters`` Section 5. Mean ``E[N] m``, variance ``(E[N] + Var N) m^2``.
    Sampled as ``m * Gamma(N, 1)`` (reparameterised in ``m``).
    """

    phase_mean: Float[ArrayLike, ""]
    counts: Float[ArrayLike, " k"]
    probs: Float[ArrayLike, " k"]
    n_uniforms = None

    def __check_init__(self):
        _positive("PhaseCount phase_mean", self.phase_mean)
        if _is_concrete(self.probs):
            _probabilities("PhaseCount probs", self.probs)
        if _is_concrete(self.counts):
            c = np.asarray(self.counts)
            if np.any(c < 1) or np.any(c != np.round(c)):
                raise ValueError("PhaseCount counts must be positive integers")

    def _count_moments(self):
        c, p = jnp.asarray(self.counts, dtype=float), jnp.asarray(self.probs)
        m1 = jnp.sum(p * c)
        return m1, jnp.sum(p * c**2) - m1**2

    def mean(self):
        return self._count_moments()[0] * self.phase_mean

    def var(self):
        m1, v = self._count_moments()
        return (m1 + v) * jnp.asarray(self.phase_mean) ** 2

    def scaled(self, c):
        return PhaseCount(self.phase_mean * c, self.counts, self.probs)

    def phase_form(self):
        # one chain of max(counts) phases, entered counts[j] phases before its end
        counts = np.asarray(self.counts).astype(int)
        n = int(counts.max())
        rate = 1.0 / jnp.asarray(self.phase_mean)
        alpha = jnp.zeros(n, rate.dtype).at[n - counts].add(jnp.asarray(self.probs, rate.dtype))
        eye = jnp.eye(n, dtype=rate.dtype)
        return alpha, rate * (jnp.eye(n, k=1, dtype=rate.dtype) - eye)

    def sample(self, key, shape=(), dtype=None):
        dtype = _float_dtype(dtype)
        k1, k2 = jax.random.split(key)
        p = jnp.asarray(self.probs)
        idx = jax.random.choice(k1, p.shape[0], shape, p=p)
        n = jnp.asarray(self.counts, dtype=dtype)[idx]
        return (self.phase_mean * jax.random.gamma(k2, n, dtype=dtype)).astype(dtype)


class Coxian(Law):
    """Coxian law: phase ``i`` of rate ``rates[i]``, then phase ``i + 1`` with probability
    ``cont[i]``, else done (``len(cont) == len(rates) - 1``); a phase-type law started in its
    first phase. ``from_uniforms`` uses ``2k - 1`` uniforms: ``k`` exponentials and ``k - 1``
    continuation draws."""

    rates: Float[ArrayLike, " k"]
    cont: Float[ArrayLike, " km1"]

    def __check_init__(self):
        if np.ndim(self.rates) != 1 or np.shape(self.cont) != (np.shape(self.rates)[0] - 1,):
            raise ValueError("Coxian needs k rates and k - 1 continuation probabilities")
        _positive("Coxian rates", self.rates)
        if _is_concrete(self.cont):
            c = np.asarray(self.cont, dtype=float)
            if np.any((c < 0) | (c > 1)) or not np.all(np.isfinite(c)):
                raise ValueError("Coxian cont must be probabilities in [0, 1]")

    @property
    def n_uniforms(self):  # type: ignore[override]
        return 2 * np.shape(self.rates)[0] - 1

    def _reach(self):
        c = jnp.asarray(self.cont)
        return jnp.concatenate([jnp.ones(1, c.dtype), jnp.cumprod(c)])

    def mean(self):
        return jnp.sum(self._reach() / jnp.asarray(self.rates))

    def var(self):
        alpha, T = self.phase_form()
        m1 = jnp.linalg.solve(-T, jnp.ones_like(alpha))
        return 2.0 * alpha @ jnp.linalg.solve(-T, m1) - (alpha @ m1) ** 2

    def scaled(self, c):
        return Coxian(jnp.asarray(self.rates) / c, self.cont)

    def phase_form(self):
        r = jnp.asarray(self.rates, dtype=float)
        c = jnp.asarray(self.cont, r.dtype)
        k = r.shape[0]
        T = -jnp.diag(r) + jnp.diag(r[:-1] * c, k=1) if k > 1 else -jnp.diag(r)
        return jnp.eye(k, dtype=r.dtype)[0], T

    def from_uniforms(self, u):
        k = np.shape(self.rates)[0]
        e = -jnp.log(u[..., :k]) / jnp.asarray(self.rates)
        go = (u[..., k:] < jnp.asarray(self.cont)).astype(e.dtype)
        reach = jnp.concatenate([jnp.ones_like(e[..., :1]), jnp.cumprod(go, axis=-1)], axis=-1)
        return jnp.sum(reach * e, axis=-1)


def bimodal_phases(phase_mean=0.2, n1=25, n2=1, p1=1.0 / 6.0) -> PhaseCount:
    """Bimodal number of exponential phases (``bf-clusters`` Section 5): mean 1, std ~1.84."""
    return PhaseCount(phase_mean, np.array([n1, n2]), np.array([p1, 1.0 - p1]))


def zipf_phases(phase_mean=1.0, kmax=200, alpha=2.0) -> PhaseCount:
    """Zipf(kmax, alpha) number of exponential phases (``bf-clusters`` Section 5).

    With the paper's values the mean is ~3.58 and the standard deviation ~10.61.
    """
    k = np.arange(1, kmax + 1)
    w = k ** (-float(alpha))
    return PhaseCount(phase_mean, k, w / w.sum())
