"""The one registry of law names: the families of the workload files and the named laws.

Families (the canonical names, what a workload file's ``law`` says, with its fields):

=====================  =========================================================
``exponential``        ``mean``
``erlang``             ``mean``, ``k`` (int >= 1, the number of phases)
``hyperexponential``   ``probs``, ``means`` (lists of one length; probs sum to 1)
``bounded-pareto``     ``xmin``, ``xmax`` (> xmin), ``shape`` (> 0)
``deterministic``      ``value``
``coxian``             ``rates`` (k > 0), ``cont`` (k - 1 continuation probabilities)
=====================  =========================================================

Named laws (:func:`get_law`, the scheduler's ``--law``), each a member of a family or a phase
count: ``exp`` (and ``exponential``), ``erlang3``, ``hyperexp`` (``bf-clusters`` Section 5:
means 5 and 1/5, see ERRATA item 2), ``bimodal``, ``zipf`` (numbers of exponential phases,
``bf-clusters`` Section 5), ``det`` (and ``deterministic``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .._document import FieldError, integer, positive, probability, sums_to_one, vector
from ._laws import (
    BoundedPareto,
    Coxian,
    Deterministic,
    Erlang,
    Exponential,
    HyperExponential,
    Law,
    bimodal_phases,
    zipf_phases,
)

__all__ = ["get_law", "law_families", "law_fields", "law_from_fields"]


def _exponential(c: dict, where: str) -> Exponential:
    return Exponential(positive(c["mean"], f"{where}mean"))


def _erlang(c: dict, where: str) -> Erlang:
    return Erlang(integer(c["k"], f"{where}k"), positive(c["mean"], f"{where}mean"))


def _hyperexponential(c: dict, where: str) -> HyperExponential:
    probs = vector(c["probs"], f"{where}probs", probability)
    means = vector(c["means"], f"{where}means", positive)
    if len(probs) != len(means):
        raise FieldError(
            f"{where}means",
            f"has {len(means)} entries but probs has {len(probs)}; give one mean per phase",
        )
    sums_to_one(probs, f"{where}probs")
    return HyperExponential(np.array(means), np.array(probs))


def _coxian(c: dict, where: str) -> Coxian:
    rates = vector(c["rates"], f"{where}rates", positive)
    cont = vector(c["cont"], f"{where}cont", probability) if len(rates) > 1 else []
    if len(cont) != len(rates) - 1:
        raise FieldError(
            f"{where}cont",
            f"has {len(cont)} entries for {len(rates)} rates; give one per phase but the last",
        )
    return Coxian(np.array(rates, dtype=float), np.array(cont, dtype=float))


def _bounded_pareto(c: dict, where: str) -> BoundedPareto:
    xmin = positive(c["xmin"], f"{where}xmin")
    xmax = positive(c["xmax"], f"{where}xmax")
    shape = positive(c["shape"], f"{where}shape")
    if not xmax > xmin:
        raise FieldError(f"{where}xmax", f"must be > xmin, got xmin {xmin!r} and xmax {xmax!r}")
    return BoundedPareto(xmin, xmax, shape)


def _deterministic(c: dict, where: str) -> Deterministic:
    return Deterministic(positive(c["value"], f"{where}value"))


#: family -> (its fields, the reader of a table holding them)
_FAMILIES: dict[str, tuple[tuple[str, ...], Callable[[dict, str], Law]]] = {
    "exponential": (("mean",), _exponential),
    "erlang": (("mean", "k"), _erlang),
    "hyperexponential": (("probs", "means"), _hyperexponential),
    "bounded-pareto": (("xmin", "xmax", "shape"), _bounded_pareto),
    "deterministic": (("value",), _deterministic),
    "coxian": (("rates", "cont"), _coxian),
}

#: name -> the law before rescaling
_NAMED: dict[str, Callable[[], Law]] = {
    "exp": lambda: Exponential(1.0),
    "exponential": lambda: Exponential(1.0),
    "erlang3": lambda: Erlang(3, 1.0),
    "hyperexp": lambda: HyperExponential(np.array([5.0, 0.2]), np.array([1 / 6, 5 / 6])),
    "bimodal": lambda: bimodal_phases(),
    "zipf": lambda: zipf_phases(),
    "det": lambda: Deterministic(1.0),
    "deterministic": lambda: Deterministic(1.0),
}


def law_families() -> tuple[str, ...]:
    """The canonical law names, in the order the workload-file schema lists them."""
    return tuple(_FAMILIES)


def law_fields(family: str) -> tuple[str, ...]:
    """The fields of the law ``family`` in a workload file (``KeyError`` if unknown)."""
    return _FAMILIES[family][0]


def law_from_fields(family: str, table: dict, where: str = "") -> Law:
    """The law ``family`` with the parameters of ``table`` (its :func:`law_fields`).

    Raises:
        ValueError: ``"WHEREFIELD: what is wrong"`` (a :class:`FieldError`) for a bad field.
    """
    return _FAMILIES[family][1](table, where)


def get_law(name: str, mean: float | None = 1.0) -> Law:
    """A named law rescaled to ``mean`` (``None`` keeps the paper's own mean).

    Names: exp, erlang3, hyperexp (``bf-clusters`` Section 5: means 5 and 1/5, std ~2.72,
    see ERRATA item 2), bimodal, zipf, det.
    """
    try:
        law = _NAMED[name]()
    except KeyError:
        raise ValueError(f"unknown law {name!r}; choose one of {sorted(_NAMED)}") from None
    if mean is None:
        return law
    if not (isinstance(mean, (int, float)) and math.isfinite(mean) and mean > 0):
        raise ValueError(f"mean must be a finite positive number, got {mean!r}")
    return law.with_mean(mean)
