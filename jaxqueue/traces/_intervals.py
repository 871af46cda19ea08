"""Intervals for the figures of one replay, by sections of the log in time order.

A replay's mean, quantiles and tail probabilities are the log's own, exactly; an interval
beside them is for the steady-state figure of the process the log samples. There is one run,
so the intervals come from ``B`` consecutive sections of the jobs in submission order
(batch means; "sectioning", Asmussen and Glynn, *Stochastic Simulation*, Springer 2007,
Section IV.5): the centre is the whole log's figure, the half-width ``t_{B-1} sd / sqrt(B)``
from the spread of the sections' figures. A mean or a tail ``P(X > t)`` is a section mean of
``x`` or of ``x > t``; a quantile ``x_q`` gets Woodruff's interval (Woodruff, JASA 47, 1952,
as :func:`jaxqueue.stats.quantile_ci`): the fraction of each section at or below ``x_q`` gives
``q -+ h``, mapped back through the log's empirical quantile function, ``[x_{q-h}, x_{q+h}]``.
Sections far apart are nearly independent when the queue forgets its state within a section;
a figure with fewer than :data:`MIN_PER_SECTION` jobs per section gets no interval
(``None``), with the reason.
"""

from __future__ import annotations

import numpy as np

from ..stats import t_quantile

__all__ = ["SECTIONS", "MIN_PER_SECTION", "Sections"]

SECTIONS = 20
MIN_PER_SECTION = 20


class Sections:
    """The jobs of ``x`` (in submission order) cut into :data:`SECTIONS` consecutive sections;
    ``ok`` when each holds at least :data:`MIN_PER_SECTION` of them."""

    def __init__(self, x, level: float = 0.95, sections: int = SECTIONS):
        self.x = np.asarray(x, dtype=np.float64)
        self.level = level
        self.B = sections
        self.ok = self.x.size >= sections * MIN_PER_SECTION
        self.t = t_quantile(sections, level)
        self.parts = np.array_split(self.x, sections) if self.ok else []

    def _half(self, values) -> float:
        return float(self.t * np.std(values, ddof=1) / np.sqrt(self.B))

    def mean(self):
        """``(mean, [lo, hi] or None)``."""
        m = float(np.mean(self.x)) if self.x.size else None
        if not self.ok:
            return m, None
        h = self._half([p.mean() for p in self.parts])
        return m, [m - h, m + h]

    def tail(self, t: float):
        """``(P(X > t), [lo, hi] or None)``, the interval clipped to ``[0, 1]``."""
        p = float(np.mean(self.x > t)) if self.x.size else None
        if not self.ok:
            return p, None
        h = self._half([np.mean(s > t) for s in self.parts])
        return p, [max(p - h, 0.0), min(p + h, 1.0)]

    def quantile(self, q: float):
        """``(x_q, [lo, hi] or None)``: Woodruff's interval (module docstring)."""
        if not self.x.size:
            return None, None
        x = float(np.quantile(self.x, q))
        if not self.ok:
            return x, None
        h = self._half([np.mean(s <= x) for s in self.parts])
        lo = float(np.quantile(self.x, max(q - h, 0.0)))
        hi = float(np.quantile(self.x, min(q + h, 1.0)))
        return x, [min(lo, x), max(hi, x)]

    def reason(self) -> str:
        return (
            f"{self.x.size} jobs: fewer than {self.B} sections of {MIN_PER_SECTION} (no "
            "interval; the value is the log's own)"
        )
