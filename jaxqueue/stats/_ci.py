"""Estimators with confidence intervals.

Replications are independent, so a Student-t interval over replication means is exact for
normal data and asymptotically valid otherwise. Batch means turn one long correlated run into
approximately independent batches. The t quantile is computed in Python (scipy) from the static
number of replications, so the functions stay jittable.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float
from scipy.special import stdtrit  # Student-t quantile (scipy.stats.t.ppf's kernel, lighter)

__all__ = ["Estimate", "mean_ci", "log_mean_ci", "batch_means", "t_quantile", "drift"]


class Estimate(eqx.Module):
    """A point estimate with a two-sided confidence interval ``[low, high]``."""

    mean: Float[Array, "..."]
    low: Float[Array, "..."]
    high: Float[Array, "..."]
    n: int = eqx.field(static=True)
    level: float = eqx.field(static=True)

    @property
    def half_width(self) -> Float[Array, "..."]:
        return 0.5 * (self.high - self.low)

    def covers(self, value: ArrayLike) -> Array:
        return (self.low <= value) & (value <= self.high)

    def __repr__(self) -> str:
        """The numbers where they are concrete (``Estimate(mean=1.25, ci=[1, 1.5], n=20,
        level=0.95)``); shapes and dtypes under a trace."""
        arrays = (self.mean, self.low, self.high)
        if any(isinstance(a, jax.core.Tracer) for a in arrays):
            return super().__repr__()
        m, lo, hi = (np.asarray(a) for a in arrays)
        fmt = {"float_kind": lambda x: f"{x:.6g}"}
        show = lambda a: np.array2string(a, formatter=fmt, separator=", ", threshold=12)
        body = f"mean={show(m)}, ci=[{show(lo)}, {show(hi)}]"
        return f"Estimate({body}, n={self.n}, level={self.level:g})"

    def as_dict(self) -> dict:
        return {
            "mean": np.asarray(self.mean).tolist(),
            "ci": [np.asarray(self.low).tolist(), np.asarray(self.high).tolist()],
        }


def t_quantile(n: int, level: float = 0.95) -> float:
    """Two-sided Student-t quantile with ``n - 1`` degrees of freedom."""
    if n < 2:
        raise ValueError(f"a confidence interval needs at least 2 replications, got {n}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    return float(stdtrit(n - 1, 0.5 + level / 2.0))


def mean_ci(
    x: Float[ArrayLike, "n ..."], *, axis: int = 0, level: float = 0.95, shape: bool = False
) -> Estimate:
    """Mean over ``axis`` (independent replications) with a Student-t interval.

    With ``shape`` (host-side: ``x`` must be concrete), the interval is corrected for the
    shape of the observations, as right-skewed, heavy-tailed waits (a rare long job) need:

    * **skewness** ``g``: the first Edgeworth term of the studentised mean (Hall, "On the
      removal of skewness by transformation", JRSS B 54, 1992; Johnson, JASA 73, 1978): the
      quantiles of ``(xbar - mu) / se`` are ``q_a - g (2 q_a^2 + 1) / (6 sqrt(n))``, so the
      interval is ``[xbar - (q - c) se, xbar + (q + c) se]`` with
      ``c = g (2 q^2 + 1) / (6 sqrt(n))`` (clipped to ``|c| <= q / 2``);
    * **kurtosis** ``k`` (excess): the t quantile takes the degrees of freedom of a scaled
      chi-square with the variance of ``s^2``, ``Var(s^2) / sigma^4 = 2 / (n - 1) + k / n``
      (Satterthwaite, Biometrics Bulletin 2, 1946, applied to one non-normal variance), so
      ``df = 2 / (2 / (n - 1) + max(k, 0) / n)`` in ``[2, n - 1]``: normal data keep
      ``n - 1``; heavy tails, whose sample variance is often too small, get a longer interval.

    Coverage is checked in ``tests/stats/test_ci.py`` and ``benchmarks/bench_coverage.py``
    (figures in ``benchmarks/RESULTS.md``). What no sample shows (a tail it did not reach) no
    formula restores: estimators also require enough replications (their status says so).
    """
    x = _on_device(x)
    n = x.shape[axis]
    q = t_quantile(n, level)
    m = jnp.mean(x, axis=axis)
    sd = jnp.std(x, axis=axis, ddof=1)
    se = sd / np.sqrt(n)
    if isinstance(m, jax.core.Tracer):
        return Estimate(m, m - q * se, m + q * se, n, level)
    # concrete: the rest on the host (one XLA program less each), but the divisions: XLA
    # divides by a scalar its own way; ``f``: the dtype jnp takes numpy float64 values in
    f = jax.dtypes.canonicalize_dtype(np.float64).type
    m, sd, se, c = np.asarray(m), np.asarray(sd), np.asarray(se), 0.0
    if shape and n >= 3:
        d = np.asarray(np.asarray(x) - np.expand_dims(m, axis), dtype=np.float64)
        s = np.where(sd > 0, sd.astype(np.float64), 1.0)
        g = np.mean(d**3, axis=axis) / s**3
        k = np.mean(d**4, axis=axis) / s**4 - 3.0
        df = np.clip(2.0 / (2.0 / (n - 1) + np.maximum(k, 0.0) / n), 2.0, n - 1.0)
        q = np.asarray(stdtrit(df, 0.5 + level / 2.0), dtype=m.dtype)
        c = np.asarray(jnp.asarray(g.astype(f) * (2 * q * q + 1)) / (6 * np.sqrt(n)))
        c = np.clip(c, -q / 2, q / 2)
    lo, hi = m - (q - c) * se, m + (q + c) * se
    return Estimate(*(_on_device(v) for v in (m, lo, hi)), n, level)


def _on_device(x):
    """``jnp.asarray(x)``; a numpy value is placed by ``device_put``, which compiles nothing
    (``jnp.asarray`` compiles a program per shape and dtype)."""
    return jax.device_put(x) if isinstance(x, np.ndarray | np.generic) else jnp.asarray(x)


def log_mean_ci(x: Float[ArrayLike, "n ..."], *, axis: int = 0, level: float = 0.95) -> Estimate:
    """Mean over ``axis`` of positive replications, with a Student-t interval on the log scale.

    Delta method (Casella and Berger, *Statistical Inference*, 2nd ed., Section 5.5.4): the
    standard error of ``log(mean)`` is ``se / mean`` with ``se = s / sqrt(n)``, so the interval is

        ``[mean * exp(-q se / mean), mean * exp(q se / mean)]``,  q = t_{n-1, (1 + level) / 2}.

    Its bounds are positive whenever the mean is (a symmetric interval ``mean -+ q se`` goes
    below 0 once ``q se > mean``), it is wider above the mean than below, as right-skewed
    replication means (delays near saturation) need, and it agrees with :func:`mean_ci` to first
    order in ``se / mean``. All replications 0 give ``[0, 0]``.
    """
    x = _on_device(x)
    n = x.shape[axis]
    q = t_quantile(n, level)
    m = jnp.mean(x, axis=axis)
    se = jnp.std(x, axis=axis, ddof=1) / np.sqrt(n)
    spread = jnp.exp(q * se / jnp.where(m > 0, m, 1.0))
    return Estimate(m, m / spread, m * spread, n, level)


def batch_means(
    x: Float[ArrayLike, " t ..."], n_batches: int = 20, *, level: float = 0.95
) -> Estimate:
    """Batch-means interval for the mean of one stationary correlated sequence along axis 0."""
    x = jnp.asarray(x)
    b = x.shape[0] // n_batches
    if b < 1:
        raise ValueError(f"sequence of length {x.shape[0]} is too short for {n_batches} batches")
    batches = x[: b * n_batches].reshape(n_batches, b, *x.shape[1:]).mean(axis=1)
    return mean_ci(batches, axis=0, level=level)


def drift(first, second, scale, *, axis: int = 0, level: float = 0.999, threshold: float = 0.05):
    """Stationarity check of a run split in two halves, paired by replication.

    The increase ``second - first`` of a per-replication mean is *significant* when the
    one-sided ``level`` lower bound of its mean exceeds 0, and *material* when the mean
    increase exceeds ``threshold * |scale|``. Both together flag a run still growing: a load
    beyond the stability limit or a warm-up too short.

    Args:
        first, second: per-replication means over the two halves (replications on ``axis``).
        scale: the overall mean the increase is compared with (broadcasts with the result).
        axis: the replication axis.
        level: one-sided confidence level.
        threshold: smallest relative increase that counts.

    Returns:
        ``(mean increase, growing)`` with the replication axis reduced.
    """
    est = mean_ci(np.asarray(second) - np.asarray(first), axis=axis, level=2 * level - 1)
    mean, low = np.asarray(est.mean), np.asarray(est.low)
    return mean, (low > 0) & (mean > threshold * np.abs(scale))
