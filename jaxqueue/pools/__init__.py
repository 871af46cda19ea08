"""Balanced fairness on any compatibility graph between job classes and servers.

Generic engine (recursion over server subsets, ``bf-recursive`` Theorems 1-2), stability by
linear programming, the balance function / stationary law on a box, and M-model closed forms.
``solve`` checks stability; ``solve_unchecked`` is the same kernel for optimisers (jittable with
traced rates, reports ``stable`` and gives ``inf`` delays with finite gradients when unstable).
Structured pools (polynomial in K) live in ``jaxqueue.pools.structured``; typed pools (many
servers of few types, ``TypedPool``) are solved exactly by ``solve`` over their ``2^T`` type
subsets. Pool files and typed spec strings are read by :func:`read_pool` and
:func:`parse_typed_spec`.
"""

from ._box import (
    BoxLaw as BoxLaw,
)
from ._box import (
    aggregate_detailed_measure as aggregate_detailed_measure,
)
from ._box import (
    balance_function as balance_function,
)
from ._box import (
    bf_rates as bf_rates,
)
from ._box import (
    detailed_measure as detailed_measure,
)
from ._box import (
    stationary_box as stationary_box,
)
from ._files import (
    parse_typed_spec as parse_typed_spec,
)
from ._files import (
    read_pool as read_pool,
)
from ._files import (
    read_pool_fields as read_pool_fields,
)
from ._files import (
    typed_pool_from_dict as typed_pool_from_dict,
)
from ._mmodel import (
    m_model as m_model,
)
from ._mmodel import (
    m_model_total_L as m_model_total_L,
)
from ._pool import (
    Pool as Pool,
)
from ._pool import (
    m_model_pool as m_model_pool,
)
from ._pool import (
    preset_pool as preset_pool,
)
from ._recursion import (
    DEFAULT_MAX_BYTES as DEFAULT_MAX_BYTES,
)
from ._recursion import (
    MAX_SERVERS as MAX_SERVERS,
)
from ._recursion import (
    check_size as check_size,
)
from ._recursion import (
    log_inv_psi as log_inv_psi,
)
from ._recursion import (
    mean_numbers_recursive as mean_numbers_recursive,
)
from ._recursion import (
    memory_estimate as memory_estimate,
)
from ._recursion import (
    solve as solve,
)
from ._recursion import (
    solve_unchecked as solve_unchecked,
)
from ._recursion import (
    subset_layers as subset_layers,
)
from ._recursion import (
    subset_log_inv_psi as subset_log_inv_psi,
)
from ._result import (
    BFResult as BFResult,
)
from ._stability import (
    Stability as Stability,
)
from ._stability import (
    check_stable as check_stable,
)
from ._stability import (
    stability as stability,
)
from ._typed import (
    TypedPool as TypedPool,
)
from ._typed import (
    typed_estimate as typed_estimate,
)

# isort: split
# structured pools build on the generic engine above, so they are imported last
from . import structured as structured
