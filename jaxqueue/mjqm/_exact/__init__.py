"""The exact FCFS multiserver-job queue as a level-dependent QBD (``docs/concepts/exact.md``):
``_structure`` (index maps, numpy), ``_solve`` (the numbers, JAX), ``_linalg`` (dense solves
and the tail ``G``), ``_result`` (:class:`ExactResult`), ``_api`` (the entry points and their
refusals), ``_wait`` (the waiting-time distributions, :class:`WaitDistribution`)."""

from ._api import MAX_BYTES as MAX_BYTES
from ._api import MAX_PHASES as MAX_PHASES
from ._api import check_exact as check_exact
from ._api import exact as exact
from ._api import exact_lambda_c as exact_lambda_c
from ._api import exact_lambda_c_or_none as exact_lambda_c_or_none
from ._api import exact_size as exact_size
from ._api import scaled_wait_mean as scaled_wait_mean
from ._result import ExactResult as ExactResult
from ._wait import WaitDistribution as WaitDistribution
