"""Results as tables: the ``to_frame()`` of every result with per-class or per-point rows.

pandas is an optional dependency (``pip install 'jaxqueue[tables]'``); nothing here imports it
until a table is asked for. One row per class (``class``, 0-based, in the model's order); a
batched result (``jax.vmap`` over loads, sweep points) gets one row per point and class, with a
``point`` column. Intervals ``[low, high]`` become two columns ``NAME_low`` and ``NAME_high``.
"""

from __future__ import annotations

import numpy as np

PANDAS_MISSING = "tables need pandas: pip install 'jaxqueue[tables]' (or pip install pandas)"


def pandas():
    """The pandas module, or an ``ImportError`` whose message is one line saying how to get it."""
    try:  # an optional dependency, imported when a table is asked for
        import pandas as pd
    except ImportError:
        raise ImportError(PANDAS_MISSING) from None
    return pd


def per_class(columns: dict, point: dict | None = None, label: str = "class"):
    """A DataFrame with one row per class (per point and class when the arrays have a leading
    batch axis).

    Args:
        columns: name -> array of shape ``(n,)`` or ``(P, n)`` (``None`` values are left out).
        point: name -> scalar or ``(P,)`` array, repeated on every class row of its point.
        label: the name of the row index column (``class``, ``type``).
    """
    pd = pandas()
    cols = {k: np.atleast_1d(np.asarray(v)) for k, v in columns.items() if v is not None}
    cols = {
        k: v if np.issubdtype(v.dtype, np.integer) else v.astype(float) for k, v in cols.items()
    }
    first = next(iter(cols.values()))
    batch = first.ndim == 2
    P, n = first.shape if batch else (1, first.shape[0])
    data: dict = {}
    if batch:
        data["point"] = np.repeat(np.arange(P), n)
    data[label] = np.tile(np.arange(n), P)
    for k, v in (point or {}).items():
        data[k] = np.repeat(np.broadcast_to(np.asarray(v, dtype=float), (P,)), n)
    for k, v in cols.items():
        data[k] = v.reshape(P * n)
    return pd.DataFrame(data)


def bf_frame(metrics: dict):
    """The per-class table of balanced fairness from its metrics (``BFResult.metrics()``, the
    JSON of ``jaxqueue bf solve``): ``class``, ``L``, ``T``, ``gamma`` and, when computed,
    ``psi_class``."""
    return per_class({k: metrics.get(k) for k in ("L", "T", "gamma", "psi_class")})


def rows(records: list[dict], **constants):
    """A DataFrame from JSON-like row dicts (an interval ``NAME_ci = [low, high]`` split into
    ``NAME_low`` and ``NAME_high``, ``None`` as NaN; lists of other lengths and nested values
    left out), with ``constants`` as leading columns."""
    pd = pandas()
    flat = []
    for r in records:
        row = dict(constants)
        for k, v in r.items():
            if isinstance(v, (list, tuple, np.ndarray)) and np.ndim(v) == 1 and len(v) == 2:
                name = k.removesuffix("_ci")
                row[f"{name}_low"], row[f"{name}_high"] = (np.nan if x is None else x for x in v)
            elif v is None or np.ndim(v) == 0:
                row[k] = np.nan if v is None else v
        flat.append(row)
    return pd.DataFrame(flat)


def metrics_frame(metrics, workload=None):
    """The per-class table of a metrics dict or of a policy result.

    Args:
        metrics: the dict of :func:`jaxqueue.mjqm.palm_metrics` (or any ``as_dict()`` with a
            ``classes`` list: ``mjqm simulate``, ``mjqm exact``), or a
            :class:`jaxqueue.mjqm.PolicyResult` (then ``workload`` is needed).
        workload: the workload of a ``PolicyResult``.

    Returns:
        A DataFrame with one row per class: ``class``, ``lam``, then the class's fields
        (``cores``, ``prob``, ``wait_mean``, ``wait_mean_low``, ``wait_mean_high``, ...).

    Examples:
        >>> metrics_frame(palm_metrics(wl, S))  # doctest: +SKIP
    """
    if not isinstance(metrics, dict):
        if workload is None:
            raise ValueError("metrics_frame: a PolicyResult needs its workload")
        metrics = metrics.as_dict(workload)
    lam = float(metrics["lam"])
    return rows([{"class": i, "lam": lam, **c} for i, c in enumerate(metrics["classes"])])
