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

The most used entry points are re-exported here.
"""

__version__ = "0.1.0"

from . import (
    dist as dist,
)
from . import (
    mjqm as mjqm,
)
from . import (
    networks as networks,
)
from . import (
    optimize as optimize,
)
from . import (
    pools as pools,
)
from . import (
    scenarios as scenarios,
)
from . import (
    sched as sched,
)
from . import (
    stats as stats,
)
from .mjqm import (
    Workload as Workload,
)
from .mjqm import (
    palm_metrics as palm_metrics,
)
from .mjqm import (
    pile_growth as pile_growth,
)
from .mjqm import (
    sample_backward as sample_backward,
)
from .mjqm import (
    simulate as simulate_mjqm,
)
from .networks import Network as Network
from .networks import solve as solve_network
from .optimize import Problem as Problem
from .optimize import Target as Target
from .optimize import minimize as minimize
from .pools import Pool as Pool
from .pools import solve as solve
from .pools import stability as stability
from .pools import structured as structured
from .sched import simulate as simulate_sched

__all__ = [
    "dist",
    "mjqm",
    "networks",
    "optimize",
    "pools",
    "scenarios",
    "sched",
    "stats",
    "structured",
    "Workload",
    "palm_metrics",
    "pile_growth",
    "sample_backward",
    "simulate_mjqm",
    "Network",
    "solve_network",
    "Problem",
    "Target",
    "minimize",
    "Pool",
    "solve",
    "stability",
    "simulate_sched",
]
