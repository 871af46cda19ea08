"""The result convention of the package: one status enumeration, one exception, one base.

Every public estimator returns an immutable result (an ``eqx.Module`` subclass of
:class:`Result`) with a ``status`` from :class:`Status`, and takes ``throw=`` (as in
optimistix and diffrax): ``False`` (the default) returns the result whatever its status,
``True`` raises :class:`EstimateError` when the status is not ``ok``. Every estimated
quantity ``name`` with an interval (stored as ``name_ci``, as ``name_low`` / ``name_high``,
or as an :class:`~jaxqueue.stats.Estimate`) is read as an ``Estimate`` by
``result.estimate(name)``; :func:`estimate` does the same for the JSON dicts of
``palm_metrics`` and ``as_dict()``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import ClassVar

import equinox as eqx
import numpy as np

from ._ci import Estimate

__all__ = ["Status", "EstimateError", "Result", "estimate"]


class Status(enum.StrEnum):
    """Why an estimate can or cannot be trusted (a ``str``: ``Status.ok == "ok"``, and JSON
    writes the plain string).

    ``ok``: the figures can be trusted; ``unconverged``: a cap on a horizon or budget was
    hit, or too few replications; ``biased``: a bias not brought under its tolerance;
    ``nonstationary``: a stationarity check failed; ``overflow``: a buffer filled;
    ``unstable``: the load is at or beyond the stability limit; ``infeasible``
    (optimisation only): the targets are not met at a stable point.
    """

    ok = "ok"
    unconverged = "unconverged"
    biased = "biased"
    nonstationary = "nonstationary"
    overflow = "overflow"
    unstable = "unstable"
    infeasible = "infeasible"


class EstimateError(ValueError):
    """A result whose status is not ``ok``, raised under ``throw=True``. ``status`` holds
    the :class:`Status`; the message is one line: ``WHAT: status STATUS: REASON``."""

    def __init__(self, what: str, status: Status, reason: str):
        super().__init__(f"{what}: status {status}: {reason}")
        self.status = Status(status)


def _interval(get, has, name: str):
    """``(value, low, high)`` of ``name`` from its ``name_ci`` (last axis ``[low, high]``) or
    its ``name_low`` / ``name_high``; ``None`` when it has neither."""
    if has(f"{name}_ci"):
        ci = np.asarray(get(f"{name}_ci"), dtype=np.float64)
        return get(name), ci[..., 0], ci[..., 1]
    if has(f"{name}_low") and has(f"{name}_high"):
        return get(name), get(f"{name}_low"), get(f"{name}_high")
    return None


def _make(value, low, high, n: int, level: float, cls: int | None) -> Estimate:
    parts = [np.asarray(x, dtype=np.float64) for x in (value, low, high)]
    if cls is not None:
        parts = [x[..., cls] for x in parts]
    return Estimate(*parts, int(n), float(level))


def estimate(source: Mapping, name: str, *, cls: int | None = None) -> Estimate:
    """The :class:`Estimate` of ``name`` in a JSON dict (``palm_metrics``, ``as_dict()``):
    ``source[name]`` with ``source[name + "_ci"]``, ``n`` from ``samples`` or
    ``replications`` and the dict's ``level``; ``cls`` reads the row ``source["classes"][cls]``.

    Raises:
        KeyError: ``name`` has no interval in ``source``.
    """
    row = source if cls is None else source["classes"][cls]
    found = _interval(row.__getitem__, row.__contains__, name)
    if found is None:
        raise KeyError(f"{name!r} has no interval ({name}_ci) in this dict")
    n = source["samples"] if "samples" in source else source["replications"]
    return _make(*found, n, source["level"], None)


class Result(eqx.Module):
    """Base of every estimator's result: ``status`` (a :class:`Status`, a field or a
    property of the subclass), :meth:`estimate` and :meth:`raise_for_status`.

    Subclasses name the field holding their number of independent replications or samples
    (``_size_field``) and have a ``level`` (the confidence level of their intervals).
    """

    _size_field: ClassVar[str] = "replications"

    def estimate(self, name: str, *, cls: int | None = None) -> Estimate:
        """The :class:`Estimate` of the quantity ``name`` (value, interval, half-width, n);
        per class an array Estimate, or class ``cls`` alone.

        Raises:
            AttributeError: ``name`` is not an estimated quantity of this result.
        """
        value = getattr(self, name)
        if isinstance(value, Estimate) and cls is None:
            return value
        if isinstance(value, Estimate):
            return _make(value.mean, value.low, value.high, value.n, value.level, cls)
        found = _interval(lambda k: getattr(self, k), lambda k: hasattr(self, k), name)
        if found is None:
            raise AttributeError(f"{type(self).__name__}.{name} has no interval")
        return _make(*found, getattr(self, self._size_field), self.level, cls)

    def status_reason(self) -> str:
        """One line saying why the status is not ``ok`` (subclasses say more)."""
        return "the figures are not to be trusted"

    def raise_for_status(self):
        """``self`` when its status is ``ok``; else raise :class:`EstimateError`."""
        if self.status != Status.ok:
            raise EstimateError(type(self).__name__, self.status, self.status_reason())
        return self
