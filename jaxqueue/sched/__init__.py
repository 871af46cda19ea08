"""The interruption scheduler of ``bf-clusters`` (Algorithm 1) as a JAX simulation.

FCFS servers pool on the oldest compatible job; each busy server interrupts its job at rate
``C_s / theta`` (m = sigma / theta interruptions per job on average) and an interrupted job
moves to the end of the queue. m = 0 is FCFS; m -> infinity is balanced fairness.
"""

from ._kernel import (
    ChainStats as ChainStats,
)
from ._kernel import (
    KernelParams as KernelParams,
)
from ._kernel import (
    KernelSpec as KernelSpec,
)
from ._kernel import (
    run_chain as run_chain,
)
from ._model import (
    ClassAssignment as ClassAssignment,
)
from ._model import (
    RandomAssignment as RandomAssignment,
)
from ._model import (
    as_assignment as as_assignment,
)
from ._model import (
    check_stability as check_stability,
)
from ._model import (
    parse_random_spec as parse_random_spec,
)
from ._simulate import (
    MIN_EFFECTIVE as MIN_EFFECTIVE,
)
from ._simulate import (
    MIN_REPLICATIONS as MIN_REPLICATIONS,
)
from ._simulate import (
    SchedResult as SchedResult,
)
from ._simulate import (
    simulate as simulate,
)
from ._simulate import (
    simulate_sweep as simulate_sweep,
)
