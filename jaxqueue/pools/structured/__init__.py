"""Structured resource pools: polynomial-time balanced fairness (``bf-recursive`` Sections 4-5).

Randomized assignment (homogeneous, heterogeneous degrees, heterogeneous server groups), nested,
line and ring pools, each a :class:`StructuredPool`: the same ``server_sets`` property, the same
load arguments (``rho``, or ``lam=``), ``kernel``, ``solve``, ``sweep``, ``class_rates`` and
``to_pool`` (the equivalent generic :class:`jaxqueue.pools.Pool`), all returning the shared
:class:`jaxqueue.pools.BFResult`. Spec strings (``random:K=100,d=10``, ``line:``, ``ring:``)
are read by :func:`parse_spec`.
"""

from ._base import ServerSets as ServerSets
from ._base import StructuredPool as StructuredPool
from ._local import HomogeneousLine as HomogeneousLine
from ._local import HomogeneousRing as HomogeneousRing
from ._local import LinePool as LinePool
from ._local import NestedPool as NestedPool
from ._local import RingPool as RingPool
from ._local import homogeneous_local_kernel as homogeneous_local_kernel
from ._local import homogeneous_local_vs_K as homogeneous_local_vs_K
from ._local import interval_pool_kernel as interval_pool_kernel
from ._local import nested_pool_kernel as nested_pool_kernel
from ._random import RandomAssignment as RandomAssignment
from ._random import RandomGroups as RandomGroups
from ._random import random_assignment_kernel as random_assignment_kernel
from ._random import random_assignment_sweep as random_assignment_sweep
from ._random import random_assignment_vs_K as random_assignment_vs_K
from ._random import random_groups_kernel as random_groups_kernel
from ._random import random_load_ratios as random_load_ratios
from ._spec import PER_CLASS_LINE_MAX_K as PER_CLASS_LINE_MAX_K
from ._spec import parse_spec as parse_spec
from ._spec import random_assignment_bf_curve as random_assignment_bf_curve
from ._spec import solve_spec as solve_spec
