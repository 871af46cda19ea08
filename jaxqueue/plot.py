"""Figures of result tables: each function returns a :class:`matplotlib.figure.Figure`.

The figures are built without ``pyplot``, so nothing here switches the global backend or keeps
a figure alive in a global registry: show one in a notebook by returning it, save it with
``fig.savefig(path)``. The inputs are the DataFrames of ``to_frame()`` and of ``jaxqueue sweep``
(an interval ``NAME`` has columns ``NAME_low`` and ``NAME_high``; they are drawn as error bars
when present).
"""

from __future__ import annotations

import numpy as np


def _figure(ax=None, size=(6.0, 4.0)):
    """A new figure and its axes, or the figure of ``ax``."""
    if ax is not None:
        return ax.figure, ax
    from matplotlib.figure import Figure  # loaded with the first figure, not on import

    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def _errors(frame, metric: str):
    """Error bars ``[[below], [above]]`` of ``metric``, or ``None`` without its interval."""
    lo, hi = f"{metric}_low", f"{metric}_high"
    if lo not in frame or hi not in frame:
        return None
    y = frame[metric].to_numpy(dtype=float)
    below = np.clip(y - frame[lo].to_numpy(dtype=float), 0, None)
    above = np.clip(frame[hi].to_numpy(dtype=float) - y, 0, None)
    return np.nan_to_num(np.vstack([below, above]), posinf=0.0, nan=0.0)


def load_curve(frame, metric: str, *, x: str = "lam", by=("class",), ax=None, logy=None):
    """``metric`` against ``x``, one line per group of the columns ``by`` present in ``frame``.

    Args:
        frame: a DataFrame (``to_frame()`` of a batched result, a sweep's CSV).
        metric: the column to draw (its interval, when present, as error bars).
        x: the column on the horizontal axis.
        by: columns whose values make one line each (absent columns are skipped).
        ax: draw on these axes instead of a new figure.
        logy: a logarithmic vertical axis (default: when the values span over 2 decades).

    Returns:
        The figure.

    Examples:
        >>> fig = load_curve(df, "wait_mean", by=("scenario", "method", "class"))  # doctest: +SKIP
        >>> fig.savefig("wait_mean.png")  # doctest: +SKIP
    """
    fig, ax = _figure(ax)
    keys = [c for c in by if c in frame]
    groups = frame.groupby(keys, sort=False) if keys else [((), frame)]
    for name, g in groups:
        g = g.sort_values(x)
        name = name if isinstance(name, tuple) else (name,)
        label = ", ".join(f"{k} {v}" for k, v in zip(keys, name, strict=True)) or metric
        ax.errorbar(
            g[x], g[metric], yerr=_errors(g, metric), marker="o", ms=3, capsize=2, label=label
        )
    y = frame[metric].to_numpy(dtype=float)
    y = y[np.isfinite(y) & (y > 0)]
    if logy if logy is not None else (y.size and y.max() > 100 * y.min()):
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(metric)
    if keys:
        ax.legend(fontsize=7)
    return fig


def per_class(frame, metric: str, *, label: str = "class", ax=None):
    """A bar per class of ``metric`` (with its interval as error bars when present).

    Args:
        frame: the one-point DataFrame of ``to_frame()``.
        metric: the column to draw.
        label: the column naming the bars.
        ax: draw on these axes instead of a new figure.

    Returns:
        The figure.

    Examples:
        >>> per_class(exact(wl, 1.35).to_frame(wl), "wait_mean").savefig("w.png")  # doctest: +SKIP
    """
    fig, ax = _figure(ax)
    names = [str(v) for v in frame[label]]
    ax.bar(names, frame[metric], yerr=_errors(frame, metric), capsize=3)
    ax.set_xlabel(label)
    ax.set_ylabel(metric)
    return fig
