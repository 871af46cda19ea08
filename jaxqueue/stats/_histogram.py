"""Log-spaced histograms of waiting times binned from float32 bits, and their quantiles.

Bin 0 holds the atom at 0, bin 1 the interval ``(0, lo)``, then one bin per float32 code
``bits >> shift`` (``bins_per_octave`` bins per octave, edges ``2^e (1 + j /
bins_per_octave)``) up to ``hi``, and an overflow bin. Binning reads the exponent and the top
mantissa bits of the value (no logarithm, no search), inside jit; the counts are integers,
so their sum over tiles and devices does not depend on how the replications are spread.
Quantiles interpolate log-linearly within a bin: accurate to ``1 / bins_per_octave`` octave.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["log_histogram", "hist_layout", "hist_bins", "quantile_from_hist", "density_from_hist"]


def hist_layout(lo, hi, bins_per_octave):
    """The layout from ``lo`` to ``hi`` (module docstring). Returns ``(n_bins, shift,
    lo_code, edges)``."""
    shift = 23 - int(math.log2(bins_per_octave))
    lo_code = int(np.array(lo, np.float32).view(np.int32)) >> shift
    hi_code = (int(np.array(hi, np.float32).view(np.int32)) >> shift) + 1
    codes = np.arange(lo_code, hi_code + 1, dtype=np.int64)
    inner = (codes << shift).astype(np.int32).view(np.float32).astype(float)
    edges = np.concatenate([[0.0, 0.0], inner, [np.inf]])
    return len(edges) - 1, shift, lo_code, edges


def log_histogram(scale, hist_range=None, bins_per_octave=16):
    """:func:`hist_layout` of ``hist_range`` ``(low, high)``, by default ``1e-4`` to ``1e6``
    times ``scale`` (a mean service time), checked.

    Raises:
        ValueError: ``hist_range`` not ``0 < low < high`` or ``bins_per_octave`` not a power
            of 2 up to 64.
    """
    lo, hi = hist_range if hist_range is not None else (1e-4 * scale, 1e6 * scale)
    if not (0 < lo < hi and math.isfinite(hi)):
        raise ValueError(f"hist_range must satisfy 0 < low < high, got {hist_range!r}")
    if bins_per_octave not in (1, 2, 4, 8, 16, 32, 64):
        raise ValueError(f"bins_per_octave must be a power of 2 <= 64, got {bins_per_octave!r}")
    return hist_layout(lo, hi, bins_per_octave)


def hist_bins(wait, cls, *, lo_code, n_bins, shift):
    """Flat histogram bins ``cls * n_bins + b`` of waits (traceable): ``b = 0`` the atom at
    0, then the log-scale bins read from the float32 bit pattern, clipped to the range."""
    code = jax.lax.bitcast_convert_type(wait.astype(jnp.float32), jnp.int32) >> shift
    b = jnp.where(wait > 0, jnp.clip(code - lo_code + 2, 1, n_bins - 1), 0)
    return cls * n_bins + b


def quantile_from_hist(counts, edges, q):
    """Quantile ``q`` of a histogram with an atom at 0 (bin 0), interpolated log-linearly."""
    n = counts.sum()
    if n == 0:
        return float("nan")
    cum = np.cumsum(counts) / n
    b = int(np.searchsorted(cum, q, side="left"))
    if b == 0:
        return 0.0
    lo, hi = edges[b], edges[b + 1]
    prev = cum[b - 1]
    frac = (q - prev) / max(cum[b] - prev, 1e-300)
    if b == 1:  # (0, lo): linear
        return float(hi * frac)
    if not np.isfinite(hi):
        return float(lo)
    return float(lo * (hi / lo) ** frac)


def density_from_hist(counts, edges):
    """``(bin_centres, density, p0)``: the density on the positive bins (geometric centres)
    and the probability of the atom at 0."""
    n = max(counts.sum(), 1)
    lo, hi = edges[1:-2], edges[2:-1]
    centres = np.sqrt(np.maximum(lo, hi * 1e-3) * hi)
    return centres, counts[1:-1] / n / (hi - lo), counts[0] / n
