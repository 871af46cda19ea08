"""A workload fitted to a job log: classes by core count, a phase-type service law per class
fitted by its first two moments, the arrival rate, and a report of the fit.

Classes: each distinct core count is a class; a count held by fewer than ``min_share`` of the
jobs is merged into the next larger count kept (its jobs take that class's cores: the fit never
asks for fewer cores than a job used), the largest count is always kept; while more than
``max_classes`` remain, the class with the fewest jobs (the largest excepted) is merged into
the next one up.

Service laws by moments (mean ``m``, squared coefficient of variation ``c2``), so that the exact
solver applies (``laws="ph"``, the default): exponential where ``c2`` is within 5% of 1,
Erlang-``k`` with ``k = round(1 / c2)`` below (exponential at ``k = 1``), the two-phase
hyperexponential with balanced means (``p_i m_i`` equal) above; ``"exponential"`` keeps only
the mean; ``"empirical"`` keeps the class's run times (:class:`~jaxqueue.dist.Empirical`; no
file form).
Arrivals: rate ``(n - 1) / (last - first submit)``; Poisson (``arrivals="poisson"``, the
default: what the exact solver and workload files take) with the inter-arrival ``scv``
reported (1 for Poisson arrivals), or a renewal law (``arrivals="renewal"``): the inter-arrival
times fitted by their two moments by the rule of the service laws (an ``scv`` within 5% of 1
stays Poisson). Goodness of fit: the Kolmogorov-Smirnov distance between a
class's run times and its fitted law.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

import numpy as np
from scipy import optimize as _opt
from scipy import stats as _st

from ..dist import Empirical, Erlang, Exponential, HyperExponential
from ..mjqm import Workload
from ._read import JobLog
from ._replay import trace_jobs

__all__ = ["Fit", "fit", "LAWS", "ARRIVALS"]

#: The ``laws`` :func:`fit` takes.
LAWS = ("ph", "exponential", "empirical")
#: The ``arrivals`` :func:`fit` takes.
ARRIVALS = ("poisson", "renewal")
_MAX_ERLANG = 100
_EXP_BAND = 0.05  # an scv this close to 1 is fitted by the exponential


def _classes(cores: np.ndarray, max_classes: int, min_share: float):
    """The kept core counts (ascending) and each job's class (module docstring)."""
    sizes, counts = np.unique(cores, return_counts=True)
    n = counts.sum()
    keep = [i for i in range(len(sizes)) if counts[i] >= min_share * n or i == len(sizes) - 1]
    target = {}  # size index -> kept index (the next kept size up)
    for i in range(len(sizes)):
        target[i] = next(k for k in keep if k >= i)
    groups = {k: sum(counts[i] for i in target if target[i] == k) for k in keep}
    while len(keep) > max_classes:
        rare = min(keep[:-1], key=lambda k: (groups[k], k))
        up = keep[keep.index(rare) + 1]
        groups[up] += groups.pop(rare)
        target = {i: (up if t == rare else t) for i, t in target.items()}
        keep.remove(rare)
    kept = sizes[keep]
    idx = np.searchsorted(sizes, cores)
    cls = np.searchsorted(kept, sizes[[target[i] for i in range(len(sizes))]])[idx]
    return kept.astype(int), cls.astype(np.int64)


def _ph(m: float, c2: float, laws: str, x: np.ndarray):
    """The law of one class and its file fields."""
    if laws == "empirical":
        return Empirical(np.asarray(x, dtype=float)), None
    if laws == "exponential" or abs(c2 - 1.0) <= _EXP_BAND:
        return Exponential(m), {"law": "exponential", "mean": m}
    if c2 < 1.0:
        k = int(min(max(round(1.0 / max(c2, 1e-12)), 1), _MAX_ERLANG))
        if k == 1:
            return Exponential(m), {"law": "exponential", "mean": m}
        return Erlang(k, m), {"law": "erlang", "mean": m, "k": k}
    p1 = 0.5 * (1.0 + math.sqrt((c2 - 1.0) / (c2 + 1.0)))
    probs = [p1, 1.0 - p1]
    means = [m / (2.0 * p1), m / (2.0 * (1.0 - p1))]
    return HyperExponential(means, probs), {
        "law": "hyperexponential",
        "probs": probs,
        "means": means,
    }


def _cdf(fields, x):
    law = fields["law"]
    if law == "exponential":
        return _st.expon.cdf(x, scale=fields["mean"])
    if law == "erlang":
        k = fields["k"]
        return _st.gamma.cdf(x, k, scale=fields["mean"] / k)
    return sum(
        p * _st.expon.cdf(x, scale=mu)
        for p, mu in zip(fields["probs"], fields["means"], strict=True)
    )


def _quantile(fields, q: float, hi: float) -> float:
    f = lambda t: _cdf(fields, t) - q  # noqa: E731
    while f(hi) < 0:
        hi *= 2
    return float(_opt.brentq(f, 0.0, hi, xtol=1e-12 * hi))


def _ks(fields, x: np.ndarray) -> float:
    """The Kolmogorov-Smirnov distance of the sample ``x`` to the law of ``fields``."""
    xs = np.sort(x)
    F = _cdf(fields, xs)
    n = xs.size
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - F), np.max(F - (i - 1) / n)))


@dataclasses.dataclass(frozen=True, eq=False)
class Fit:
    """A workload fitted to a job log (:func:`fit`).

    Attributes:
        workload: the fitted :class:`~jaxqueue.mjqm.Workload` (its ``arrival``: ``None``
            for Poisson arrivals, else the fitted renewal law).
        lam: the arrival rate. interarrival_scv: the log's inter-arrival scv.
        classes: one dict per class: ``cores``, ``prob``, ``jobs``, ``sizes`` (the core counts
            merged into it), ``law`` (the file fields), ``mean`` / ``fitted_mean``, ``scv`` /
            ``fitted_scv``, ``p99`` / ``fitted_p99``, ``work_share``, ``ks`` (goodness of
            fit: the Kolmogorov-Smirnov distance).
        rule: the class rule, in words. log: the jobs that ran.
        arrival_law: the file fields of the inter-arrival law of mean 1 (the exponential for
            Poisson arrivals).
    """

    workload: Workload
    lam: float
    interarrival_scv: float
    classes: list
    rule: str
    log: JobLog
    laws: str
    arrival_law: dict

    def as_dict(self) -> dict:
        """The JSON object of ``jaxqueue workload fit``."""
        return {
            "trace": self.log.path,
            "servers": int(self.workload.s),
            "servers_from": self.log.servers_from,
            "jobs": len(self.log),
            "lam": self.lam,
            "arrivals": "poisson" if self.workload.arrival is None else "renewal",
            "arrival_law": self.arrival_law,
            "interarrival_scv": self.interarrival_scv,
            "laws": self.laws,
            "rule": self.rule,
            "classes": self.classes,
        }

    def to_toml(self, name: str | None = None) -> str:
        """The fitted workload as a workload file (``scenarios.get`` reads it back)."""
        if self.laws == "empirical":
            raise ValueError(
                "an empirical law has no workload-file form; fit with laws='ph' or 'exponential'"
            )
        if self.workload.arrival is not None:
            raise ValueError(
                "a renewal arrival law has no workload-file form (Poisson arrivals only); fit "
                "with arrivals='poisson'"
            )
        name = name or self.workload.name

        def val(v):
            if isinstance(v, str):
                return f'"{v}"'
            if isinstance(v, (list, tuple)):
                return "[" + ", ".join(val(x) for x in v) + "]"
            return repr(int(v)) if isinstance(v, (int, np.integer)) else repr(float(v))

        lines = [
            f"# fitted by jaxqueue workload fit from {self.log.path}",
            f"# {len(self.log)} jobs, lam = {self.lam!r} (Poisson); {self.rule}",
            f"name = {val(name)}",
            f"servers = {int(self.workload.s)}",
        ]
        for c in self.classes:
            lines += ["", "[[classes]]", f"cores = {c['cores']}", f"prob = {val(c['prob'])}"]
            lines += [f"{k} = {val(v)}" for k, v in c["law"].items()]
        return "\n".join(lines) + "\n"


def fit(
    log,
    *,
    max_classes: int = 8,
    laws: str = "ph",
    min_share: float = 0.01,
    servers: int | None = None,
    arrivals: str = "poisson",
) -> Fit:
    """Fit a workload to the job log ``log`` (a :class:`JobLog` or a path; its jobs that ran)
    by the rules of the module docstring.

    Args:
        max_classes: the most classes (>= 1). laws: one of :data:`LAWS`.
        min_share: a core count held by fewer jobs than this share is merged upwards.
        servers: the machine size (default: the log's ``MaxProcs``).
        arrivals: one of :data:`ARRIVALS` (module docstring).

    Returns:
        :class:`Fit` (``.workload``, ``.lam``, the report ``.classes``, ``.to_toml()``).

    Raises:
        ValueError: one line (a malformed log, no machine size, a bad option, fewer than two
            submit times, a class whose run times are all 0, under ``laws="empirical"``
            a class with a run time of 0).
    """
    if isinstance(max_classes, bool) or not isinstance(max_classes, int) or max_classes < 1:
        raise ValueError(f"fit: max_classes must be an integer >= 1, got {max_classes!r}")
    if laws not in LAWS:
        raise ValueError(f"fit: laws must be one of {', '.join(LAWS)}, got {laws!r}")
    if arrivals not in ARRIVALS:
        raise ValueError(f"fit: arrivals must be one of {', '.join(ARRIVALS)}, got {arrivals!r}")
    if not 0.0 <= min_share < 1.0:
        raise ValueError(f"fit: min_share must lie in [0, 1), got {min_share!r}")
    ran, s, _, _ = trace_jobs(log, servers)
    span = float(ran.submit[-1] - ran.submit[0])
    if len(ran) < 2 or span <= 0:
        raise ValueError(f"{ran.path}: fewer than two distinct submit times: no arrival rate")
    lam = (len(ran) - 1) / span
    gaps = np.diff(ran.submit)
    ia_scv = float(gaps.var() / gaps.mean() ** 2)
    arrival, ia_fields = _ph(1.0, ia_scv if arrivals == "renewal" else 1.0, "ph", gaps)
    kept, cls = _classes(ran.cores, max_classes, min_share)
    x_all = ran.runtime
    total_work = float(np.sum(ran.cores * x_all))
    rows, services, probs = [], [], []
    for c, cores in enumerate(kept):
        mask = cls == c
        x = x_all[mask]
        m = float(x.mean())
        if not m > 0:
            raise ValueError(
                f"{ran.path}: the {int(mask.sum())} jobs of {cores} cores all ran 0 s: no "
                "service law"
            )
        if laws == "empirical" and not np.all(x > 0):
            raise ValueError(
                f"{ran.path}: {int(np.sum(x <= 0))} of the {x.size} jobs of {cores} cores ran "
                "0 s: an empirical law takes positive run times; fit with laws='ph' or "
                "'exponential'"
            )
        c2 = float(x.var() / m**2)
        law, fields = _ph(m, c2, laws, x)
        p99 = float(np.quantile(x, 0.99))
        ph = fields if fields is not None else None
        fm = float(law.mean())
        fscv = float(law.var() / fm**2) if hasattr(law, "var") else c2
        rows.append(
            {
                "cores": int(cores),
                "prob": float(mask.mean()),
                "jobs": int(mask.sum()),
                "sizes": sorted(int(v) for v in np.unique(ran.cores[mask])),
                "law": ph if ph is not None else {"law": "empirical"},
                "mean": m,
                "fitted_mean": fm,
                "scv": c2,
                "fitted_scv": fscv,
                "p99": p99,
                "fitted_p99": _quantile(ph, 0.99, 10 * m) if ph else p99,
                "work_share": float(cores * x.sum() / total_work) if total_work > 0 else 0.0,
                "ks": _ks(ph, x) if ph else 0.0,
            }
        )
        services.append(law)
        probs.append(float(mask.mean()))
    rule = (
        f"classes by core count: a count held by fewer than {min_share:g} of the jobs merged "
        f"into the next larger count kept, then the rarest merged upwards to at most "
        f"{max_classes} classes"
    )
    base = pathlib.Path(ran.path).name
    for suffix in (".gz", ".swf", ".csv"):
        base = base.removesuffix(suffix)
    name = base if ran.format in ("swf", "csv") and base else "fitted"
    poisson = ia_fields["law"] == "exponential"
    wl = Workload(
        s, kept, np.asarray(probs), services, arrival=None if poisson else arrival, name=name
    )
    return Fit(wl, lam, ia_scv, rows, rule, ran, laws, ia_fields)
