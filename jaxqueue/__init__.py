"""jaxqueue: differentiable JAX numerics for the performance of clusters modelled as queues.

Subpackages (data flows models -> kernels -> estimators -> optimisation):

- :mod:`jaxqueue.dist`: service and inter-arrival laws.
- :mod:`jaxqueue.pools`: balanced fairness on compatibility graphs (generic recursion over
  server subsets; :mod:`jaxqueue.pools.structured` for polynomial-time structured pools).
- :mod:`jaxqueue.networks`: open, closed and mixed networks of pools.
- :mod:`jaxqueue.sched`: the interruption scheduler (FCFS .. balanced fairness), simulated.
- :mod:`jaxqueue.mjqm`: the multiserver-job queue (MJSRE): forward simulation, backward
  sub-perfect sampling, stability by pile growth.
- :mod:`jaxqueue.stats`: estimators with confidence intervals.
- :mod:`jaxqueue.optimize`: gradient-based dimensioning with optax.
- :mod:`jaxqueue.scenarios`: the papers' presets.
- :mod:`jaxqueue.traces`: cluster job logs (SWF, CSV) read, fitted as workloads, replayed.

The most used entry points are re-exported here. Subpackages and re-exports are imported on
first use (PEP 562): ``import jaxqueue`` costs nothing, and ``jaxqueue --help`` or a command
loads only the modules it needs.
"""

__version__ = "0.1.0"

import importlib
from typing import TYPE_CHECKING

_SUBPACKAGES = (
    "dist",
    "mjqm",
    "networks",
    "optimize",
    "pools",
    "scenarios",
    "sched",
    "stats",
    "traces",
)

_REEXPORTS = {  # name -> (subpackage, its attribute)
    "Workload": ("mjqm", "Workload"),
    "palm_metrics": ("mjqm", "palm_metrics"),
    "pile_growth": ("mjqm", "pile_growth"),
    "sample_backward": ("mjqm", "sample_backward"),
    "simulate_mjqm": ("mjqm", "simulate"),
    "Network": ("networks", "Network"),
    "solve_network": ("networks", "solve"),
    "Problem": ("optimize", "Problem"),
    "Target": ("optimize", "Target"),
    "minimize": ("optimize", "minimize"),
    "Pool": ("pools", "Pool"),
    "solve": ("pools", "solve"),
    "stability": ("pools", "stability"),
    "structured": ("pools", "structured"),
    "simulate_sched": ("sched", "simulate"),
}

__all__ = [*_SUBPACKAGES, *_REEXPORTS]


def __getattr__(name: str):
    """A subpackage or re-export, imported on first use (then cached in the module)."""
    if name in _SUBPACKAGES:
        value = importlib.import_module(f"{__name__}.{name}")
    elif name in _REEXPORTS:
        sub, attr = _REEXPORTS[name]
        value = getattr(importlib.import_module(f"{__name__}.{sub}"), attr)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # what static analysers and IDEs see
    from . import dist, mjqm, networks, optimize, pools, scenarios, sched, stats, traces
    from .mjqm import Workload, palm_metrics, pile_growth, sample_backward
    from .mjqm import simulate as simulate_mjqm
    from .networks import Network
    from .networks import solve as solve_network
    from .optimize import Problem, Target, minimize
    from .pools import Pool, solve, stability, structured
    from .sched import simulate as simulate_sched
