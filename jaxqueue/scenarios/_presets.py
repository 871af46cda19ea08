"""The builders of the shipped scenarios (their sources: ``jaxqueue.scenarios``)."""

from __future__ import annotations

import csv
from importlib import resources

import numpy as np

from ..dist import BoundedPareto, Erlang, Exponential, HyperExponential
from ..mjqm import Workload
from ..mjqm import load_workload as load_workload
from ..pools import preset_pool


def _read_csv(filename: str) -> list[dict[str, float]]:
    text = resources.files(__package__).joinpath("data", filename).read_text()
    return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(text.splitlines())]


def _five_class(law: str) -> Workload:
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
    return Workload(
        200,
        [1, 100],
        np.array([0.5, 0.5]),
        [Exponential(small_mean), Exponential(big_mean)],
        name="two-class-200",
    )


def _two_class_256(p_big: float = 1e-3, big_mean: float = 40.0) -> Workload:
    return Workload(
        256,
        [1, 256],
        np.array([1.0 - p_big, p_big]),
        [Exponential(1.0), Exponential(big_mean)],
        name="two-class-256",
    )


def _borg() -> Workload:
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
    return preset_pool(name)


BUILDERS = {
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
