"""Gradient-based dimensioning: tune capacities, degrees and arrival mixes against targets.

One entry point, :func:`minimize`, takes a :class:`Problem` (parameters with transforms for
positivity / bounds / simplex, a cost, differentiable metrics, per-class :class:`Target` s, an
exact re-evaluation and a feasibility polish) and returns an :class:`OptimizeResult`.
Differentiable objectives: :func:`m_model_metrics`, :class:`SubsetBF`,
:func:`random_degree_metrics` (balanced fairness); the multiserver-job queue's simulated
derivatives are :func:`jaxqueue.mjqm.sensitivity`'s. Case studies:
:func:`jaxqueue.optimize.cases.run_case`.
"""

from . import cases as cases
from ._bf import (
    SubsetBF as SubsetBF,
)
from ._bf import (
    m_model_metrics as m_model_metrics,
)
from ._bf import (
    random_degree_metrics as random_degree_metrics,
)
from ._minimize import Penalty as Penalty
from ._minimize import Polish as Polish
from ._minimize import minimize as minimize
from ._mjqm_cases import five_class_workload as five_class_workload
from ._problem import (
    Box as Box,
)
from ._problem import (
    Fixed as Fixed,
)
from ._problem import (
    OptimizeResult as OptimizeResult,
)
from ._problem import (
    Positive as Positive,
)
from ._problem import (
    Problem as Problem,
)
from ._problem import (
    Simplex as Simplex,
)
from ._problem import (
    Target as Target,
)
from .cases import CASES as CASES
from .cases import run_case as run_case
