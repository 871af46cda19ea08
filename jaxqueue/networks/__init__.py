"""Open, closed and mixed networks of multi-server pools (``bf-networks``).

Public API: :class:`Network` (model + validation), :func:`traffic` (traffic equations),
:func:`check_stability`, :func:`solve` (exact product-form metrics), :func:`solve_truncated`
(open network with arrivals blocked at a total of ``n_max`` jobs), :class:`NetworkResult`,
:func:`population_sums` / :func:`pool_population_sums` / :func:`lattice_tables` /
:func:`log_convolve` (the per-pool population sums of the balance function and their
convolution, in log space), :func:`network_from_spec` and :func:`read_network` (the JSON /
TOML spec of ``jaxqueue network solve``).
"""

from ._files import network_from_spec as network_from_spec
from ._files import read_network as read_network
from ._lattice import lattice_tables as lattice_tables
from ._lattice import log_convolve as log_convolve
from ._lattice import pool_population_sums as pool_population_sums
from ._lattice import population_sums as population_sums
from ._model import Network as Network
from ._solve import NetworkResult as NetworkResult
from ._solve import solve as solve
from ._solve import solve_truncated as solve_truncated
from ._traffic import check_stability as check_stability
from ._traffic import traffic as traffic
