"""The recurrence engine: the MJQM on the ordered workload vector (``mjsre`` eq. (2)).

The engine owns its step objects (``_steps.py``: FCFS on one or several resource types,
eq. (2) and (15); specific servers, eq. (14); random assignment, Appendix A), chosen from the
policy (``policies.FCFS``, ``policies.RandomAssignment``: ``recurrence = True``) and the
workload by :func:`step_for`; the formulas live once, in ``_step.py``. Its drivers take the
policy: the forward scan (:func:`simulate`, Section 7.4), the backward sampler
(:func:`sample_backward`, Algorithm 1; FCFS only), pile growth (:func:`pile_growth`,
Algorithm 2) and :func:`run_jobs` (given inputs; the optimisation sampler).
"""

from ._backward import BackwardSamples as BackwardSamples
from ._backward import BiasTest as BiasTest
from ._backward import backward_step as backward_step
from ._backward import horizon_floor as horizon_floor
from ._backward import loynes_state as loynes_state
from ._backward import sample_backward as sample_backward
from ._forward import simulate as simulate
from ._forward_result import ForwardResult as ForwardResult
from ._pile import pile_growth as pile_growth
from ._pile import pile_step as pile_step
from ._scan import run_jobs as run_jobs
from ._step import core_groups as core_groups
from ._step import fcfs_rows_step as fcfs_rows_step
from ._step import fcfs_rows_wait as fcfs_rows_wait
from ._steps import step_for as step_for
