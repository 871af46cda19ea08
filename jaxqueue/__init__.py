"""jaxqueue: differentiable JAX numerics for the performance of clusters modelled as queues.

Subpackages (data flows models -> kernels -> estimators -> optimisation):

- ``jaxqueue.dist``: service and inter-arrival laws.
- ``jaxqueue.pools``: balanced fairness on compatibility graphs (generic and structured).
- ``jaxqueue.networks``: open, closed and mixed networks of pools.
- ``jaxqueue.sched``: the interruption scheduler, simulated.
- ``jaxqueue.mjqm``: the multiserver-job queue (MJSRE).
- ``jaxqueue.stats``: estimators with confidence intervals.
- ``jaxqueue.optimize``: gradient-based dimensioning.
- ``jaxqueue.scenarios``: the papers' presets.
"""

__version__ = "0.1.0"

from . import dist as dist, stats as stats
