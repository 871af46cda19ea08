"""The papers' preset scenarios, each citing its source.
``get(name)`` returns a :class:`jaxqueue.mjqm.Workload` for the multiserver-job scenarios and a
:class:`jaxqueue.pools.Pool` for the balanced-fairness presets; ``names()`` lists them and
``describe(name)`` gives the source. ``get`` also reads a multiserver-job workload from a TOML or
JSON file (``get("my-cluster.toml")``; schema in :mod:`jaxqueue.mjqm._files`, example in
``examples/workloads/five-class-exp.toml``).

Multiserver-job queue (``mjsre``):

* ``five-class-exp``, ``five-class-erlang3``, ``five-class-hyperexp``, ``five-class-bpareto``:
  Section 8.2 / Table 2, s = 20, five classes (1, 2, 5, 10, 15 cores), Poisson arrivals; the
  exact parameters of each service law are in ``data/five-class.csv`` (mean service times as
  printed, 0.83 and 3.33, ``docs/errata.md`` item 4). ``lambda_ideal = 2.107``.
* ``two-class-200``: Section 8.1, s = 200, one-core and 100-core jobs equally likely,
  exponential service of mean 1 (``get("two-class-200", big_mean=m)`` varies the big jobs'
  mean, the x axis of Fig. 2(a)).
* ``two-class-256``: Section 7.4, s = 256, one-core jobs (mean 1) and all-core jobs (mean 40,
  probability 1e-3), exponential; its stability limit has the closed form of eq. (8).
* ``borg-cell-b``: s = 2048, 26 classes measured on Google Borg cell B
  (``data/borg-cell-b-26.csv``; the paper's Section 8.3 uses a 17-class version of the same
  data), exponential service times with the measured means.

Balanced fairness (``bf-clusters`` Section 5): ``m-model-sym`` and ``m-model-asym``
(see :func:`jaxqueue.pools.preset_pool`).
"""

from __future__ import annotations

import csv
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np

from .._document import is_path

if TYPE_CHECKING:
    from ..mjqm import Workload

__all__ = ["get", "names", "describe"]

_SOURCES = {
    "five-class-exp": "mjsre Section 8.2, Table 2 (exponential), s = 20",
    "five-class-erlang3": "mjsre Section 8.2, Table 2 (Erlang-3), s = 20",
    "five-class-hyperexp": "mjsre Section 8.2, Table 2 (2-phase hyperexponential)",
    "five-class-bpareto": "mjsre Section 8.2, Table 2 (bounded Pareto, shape 1.4)",
    "two-class-200": "mjsre Section 8.1, Fig. 2(a): s = 200, 1 or 100 cores",
    "two-class-256": "mjsre Section 7.4, Table 1: s = 256, 1 or 256 cores",
    "borg-cell-b": "Google Borg cell B, 26 classes, s = 2048 (mjsre Section 8.3)",
    "m-model-sym": "bf-clusters Section 5: M model, mu = (1, 1, 1)",
    "m-model-asym": "bf-clusters Section 5: M model, servers 1 and 3 only",
}


def _read_csv(filename: str) -> list[dict[str, float]]:
    text = resources.files(__package__).joinpath("data", filename).read_text()
    return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(text.splitlines())]


def _five_class(law: str) -> Workload:
    # the models (and jax) load when a scenario is built: the command line lists the names
    from ..dist import BoundedPareto, Erlang, Exponential, HyperExponential
    from ..mjqm import Workload

    rows = _read_csv("five-class.csv")
    cores = [int(r["cores"]) for r in rows]
    probs = np.array([r["prob"] for r in rows])
    if law == "exp":
        services = [Exponential(r["mean"]) for r in rows]
    elif law == "erlang3":
        services = [Erlang(int(r["erlang_k"]), r["mean"]) for r in rows]
    elif law == "hyperexp":
        services = [
            HyperExponential(
                np.array([r["hyperexp_mean_phase1"], r["hyperexp_mean_phase2"]]),
                np.array([r["hyperexp_p_phase1"], 1.0 - r["hyperexp_p_phase1"]]),
            )
            for r in rows
        ]
    else:
        services = [
            BoundedPareto(r["bpareto_xmin"], r["bpareto_xmax"], r["bpareto_shape"]) for r in rows
        ]
    return Workload(20, cores, probs, services, name=f"five-class-{law}")


def _two_class_200(big_mean: float = 1.0, small_mean: float = 1.0) -> Workload:
    # the models (and jax) load when a scenario is built: the command line lists the names
    from ..dist import Exponential
    from ..mjqm import Workload

    return Workload(
        200,
        [1, 100],
        np.array([0.5, 0.5]),
        [Exponential(small_mean), Exponential(big_mean)],
        name="two-class-200",
    )


def _two_class_256(p_big: float = 1e-3, big_mean: float = 40.0) -> Workload:
    # the models (and jax) load when a scenario is built: the command line lists the names
    from ..dist import Exponential
    from ..mjqm import Workload

    return Workload(
        256,
        [1, 256],
        np.array([1.0 - p_big, p_big]),
        [Exponential(1.0), Exponential(big_mean)],
        name="two-class-256",
    )


def _borg() -> Workload:
    # the models (and jax) load when a scenario is built: the command line lists the names
    from ..dist import Exponential
    from ..mjqm import Workload

    rows = _read_csv("borg-cell-b-26.csv")
    probs = np.array([r["prob"] for r in rows])
    probs = probs / probs.sum()  # the published probabilities sum to 1 up to rounding
    return Workload(
        2048,
        [int(r["cores"]) for r in rows],
        probs,
        [Exponential(r["mean"]) for r in rows],
        name="borg-cell-b",
    )


def _pool(name):
    # the models (and jax) load when a scenario is built: the command line lists the names
    from ..pools import preset_pool

    return preset_pool(name)


def _load_workload(path) -> Workload:
    # the models (and jax) load when a file is read: the command line lists the names
    from ..mjqm._files import load_workload

    return load_workload(path)


_BUILDERS = {
    "five-class-exp": lambda: _five_class("exp"),
    "five-class-erlang3": lambda: _five_class("erlang3"),
    "five-class-hyperexp": lambda: _five_class("hyperexp"),
    "five-class-bpareto": lambda: _five_class("bpareto"),
    "two-class-200": _two_class_200,
    "two-class-256": _two_class_256,
    "borg-cell-b": _borg,
    "m-model-sym": lambda: _pool("m-model-sym"),
    "m-model-asym": lambda: _pool("m-model-asym"),
}


def names() -> list[str]:
    """All scenario names."""
    return list(_BUILDERS)


def describe(name: str) -> str:
    """The source of scenario ``name`` (for a workload file: the file, once it parses)."""
    if name not in _BUILDERS and is_path(name):
        _load_workload(name)
        return f"TOML/JSON workload file {name}"
    _check(name)
    return _SOURCES[name]


def _check(name):
    if name not in _BUILDERS:
        raise ValueError(
            f"unknown scenario {name!r}; choose one of {names()} or a TOML/JSON workload file"
        )


def get(name, **params):
    """The scenario ``name`` (a ``Workload`` or, for the M models, a ``Pool``).

    Args:
        name: one of :func:`names`, or the path of a TOML or JSON workload file (a name with a
            path separator or a ``.toml`` / ``.json`` suffix, or an existing file; schema in
            :mod:`jaxqueue.mjqm._files`).
        **params: scenario parameters where supported (``two-class-200``: ``big_mean``,
            ``small_mean``; ``two-class-256``: ``p_big``, ``big_mean``); none for a file.

    Raises:
        ValueError: unknown name or parameter; for a file, one line naming the file and the
            field (missing file, bad syntax, unknown or missing key, wrong type or value).

    Examples:
        >>> w = get("five-class-exp")
        >>> w.servers, w.n_classes
        ((20,), 5)
    """
    if name not in _BUILDERS and is_path(name):
        if params:
            raise ValueError(f"{name}: a workload file takes no parameters, got {sorted(params)}")
        return _load_workload(name)
    _check(name)
    try:
        return _BUILDERS[name](**params)
    except TypeError:
        raise ValueError(f"scenario {name!r} does not take parameters {sorted(params)}") from None
