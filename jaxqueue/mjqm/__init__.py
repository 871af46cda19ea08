"""The multiserver-job queue (MJQM): FCFS as a stochastic recurrence (``mjsre``) and other
scheduling policies on job lists (:mod:`jaxqueue.mjqm.policies`).

Model: :class:`Workload` (Sections 2, 9.1-9.2; read by :func:`load_workload`). Front doors, each
returning a result with a ``status``:

* :func:`simulate` ``(workload, lam, policy)``, any policy, the engine chosen for it: the
  forward MJSRE (eq. (2), Section 7.4; :class:`ForwardResult`) where the policy has a
  recurrence form, else the event engine (:class:`PolicyResult`, also
  :func:`simulate_policy`); :func:`simulate_steady` (FCFS from backward samples, extended
  until its stationarity checks pass);
* :func:`sample_backward` (sub-perfect samples, Algorithm 1): :class:`BackwardSamples`, and
  :func:`palm_metrics`, :func:`wait_samples`, :func:`wait_density` (Section 6);
* :func:`exact` (the QBD, phase-type services): :class:`ExactResult`, with
  :func:`exact_lambda_c` and :func:`exact_size`; its waiting-time laws per class
  (:class:`WaitDistribution`);
* :func:`stability_limit` (exact where known, else estimated with a key, else unknown):
  :class:`StabilityResult`, with :func:`pile_growth` (Algorithm 2), :func:`lambda_c_closed_form`;
* :func:`sensitivity` (derivatives with intervals, :class:`Sensitivity`; :func:`exact_sensitivity`).

Every simulation takes ``limit=`` (a :class:`StabilityResult`, a number or ``None``) and
refuses ``lam`` at or beyond ``lambda_ideal``, a closed form or that limit
(:class:`UnstableLoadError`). Job ``n`` of replication ``r`` is a pure function of
``(key, r, n)`` (:func:`job_uniforms`, :func:`jobs_from_uniforms`, :func:`n_uniforms`).
"""

from .._tables import metrics_frame as metrics_frame
from ._exact import ExactResult as ExactResult
from ._exact import WaitDistribution as WaitDistribution
from ._exact import exact as exact
from ._exact import exact_lambda_c as exact_lambda_c
from ._exact import exact_size as exact_size
from ._files import load_workload as load_workload
from ._inputs import job_uniforms as job_uniforms
from ._inputs import jobs_from_uniforms as jobs_from_uniforms
from ._inputs import n_uniforms as n_uniforms
from ._limit import stability_limit as stability_limit
from ._palm import palm_metrics as palm_metrics
from ._palm import wait_density as wait_density
from ._palm import wait_samples as wait_samples
from ._sensitivity import Sensitivity as Sensitivity
from ._sensitivity import exact_sensitivity as exact_sensitivity
from ._sensitivity import sensitivity as sensitivity
from ._simulate import simulate as simulate
from ._stability import StabilityResult as StabilityResult
from ._stability import UnstableLoadError as UnstableLoadError
from ._stability import lambda_c_closed_form as lambda_c_closed_form
from ._steady import simulate_steady as simulate_steady
from ._workload import Workload as Workload
from .engines.events import PolicyResult as PolicyResult
from .engines.events import simulate_policy as simulate_policy
from .engines.recurrence import BackwardSamples as BackwardSamples
from .engines.recurrence import ForwardResult as ForwardResult
from .engines.recurrence import pile_growth as pile_growth
from .engines.recurrence import sample_backward as sample_backward
