"""The FCFS multiserver-job queue (MJQM) as a stochastic recurrence (``mjsre``).

API for building on this package (stable signatures)
----------------------------------------------------
Model (``_workload.py``)
    ``Workload(servers, cores, probs, services, arrival=None, *, specific=None, name="")``:
    ``servers`` an int ``s`` or a resource vector (Section 9.2); ``cores`` ``(classes,)`` or
    ``(classes, T)``; ``services`` laws of :mod:`jaxqueue.dist`; ``arrival`` the inter-arrival
    shape (``None`` = Poisson; rescaled to mean ``1/lam``); ``specific`` specific servers per
    class (Section 9.1). Helpers: ``n_classes``, ``n_types``, ``s``, ``cores_array``
    (``(classes, T)`` int32, specific servers included), ``mean_service()``, ``mean_work()``
    (``E[alpha sigma]`` per type), ``lambda_ideal()``, ``idle_servers_expected(lam)``,
    ``arrival_shape()`` (mean-1 law).
Inputs (``_inputs.py``), counter-based: a pure function of ``(key, rep, job)``
    ``draw_jobs(workload, lam, key, rep, jobs, *, dtype=float32, n_extra=0) -> JobInputs(cls,
    alpha (..., T), sigma, tau, extra)`` for any int array ``jobs`` (negative indices allowed,
    modulo 2**32); ``draw_jobs_block(workload, lam, key, rep, start, length, ...)`` for a
    contiguous range; ``job_uniforms(key, rep, jobs, n, dtype)``, ``job_uniforms_block``,
    ``jobs_from_uniforms(workload, lam, u, *, dtype)``, ``n_uniforms(workload, n_extra)``.
    Chunking, batching and device count never change the numbers; doubling a backward horizon
    reuses the same past.
Policies (``_policy.py``)
    ``Policy`` (``advance(W, alpha, sigma, tau, u) -> (X, wait, hol)``, ``step``, ``merge``):
    ``FCFSRecurrence(sizes)``, ``SpecificServers()``, ``RandomServers()``; ``policy_for(workload,
    variant)``. Every driver (forward, backward, pile growth, optimisation sampler) calls one.
Step (``_step.py``), W ascending, ``alpha`` = number of servers (1-based)
    ``mjsre_advance(W, alpha, sigma, tau) -> (X, wait, hol)`` eq. (2) before the positive
    part (the FCFS step every driver builds on; ``mmjsre_advance`` eq. (15), ``smjsre_advance``
    eq. (14)); ``mjsre_step(W, alpha, sigma, tau)`` eq. (2) in O(s);
    ``mjsre_merge(W, alpha, sigma)`` the pile step of eq. (7) (no tau, no clipping);
    ``wait_time(W, alpha) = W[alpha-1]``;
    ``mjsre_step_info`` also returns ``StepInfo(wait, hol, free)``; variants
    ``mmjsre_step[_info](Ws, alphas, sigma, tau)`` eq. (15), ``smjsre_step[_info](W, alpha,
    beta, sigma, tau, u)`` eq. (14), ``ra_step[_info](W, alpha, sigma, tau, u)`` Appendix A.
Stability (``_limit.py``, ``_stability.py``)
    ``stability_limit(workload, policy="fcfs", *, method="auto", key=None) ->
    StabilityResult``: exact where known, an estimate with its interval, or unknown. Every
    simulation takes it as ``limit=``; without it only ``lam > 0``, ``lam < lambda_ideal``
    and eq. (8) are checked, and the run's status catches the rest.
Forward simulation (``_forward.py``)
    ``simulate(workload, lam, *, key, n_jobs, n_replications, warmup, chunk, dtype, init,
    job_offset, variant, level, devices, override, throw) -> ForwardResult`` (F-MJSRE, Section
    7.4; ``throw=True`` raises ``stats.EstimateError`` on a status other than ok)
    with the metrics of Section 6 (waste corrected per ``docs/errata.md`` item 1);
    ``ForwardResult.as_dict()`` is the JSON of ``jaxqueue mjqm simulate``.
"""

from ._forward import ForwardResult as ForwardResult
from ._forward import simulate as simulate
from ._inputs import JobInputs as JobInputs
from ._inputs import draw_jobs as draw_jobs
from ._inputs import draw_jobs_block as draw_jobs_block
from ._inputs import job_uniforms as job_uniforms
from ._inputs import job_uniforms_block as job_uniforms_block
from ._inputs import jobs_from_uniforms as jobs_from_uniforms
from ._inputs import n_uniforms as n_uniforms
from ._inputs import replication_key as replication_key
from ._policy import FCFSRecurrence as FCFSRecurrence
from ._policy import Policy as Policy
from ._policy import RandomServers as RandomServers
from ._policy import SpecificServers as SpecificServers
from ._policy import policy_for as policy_for
from ._steady import simulate_steady as simulate_steady
from ._step import StepInfo as StepInfo
from ._step import mjsre_advance as mjsre_advance
from ._step import mjsre_merge as mjsre_merge
from ._step import mjsre_step as mjsre_step
from ._step import mjsre_step_info as mjsre_step_info
from ._step import mmjsre_advance as mmjsre_advance
from ._step import mmjsre_step as mmjsre_step
from ._step import mmjsre_step_info as mmjsre_step_info
from ._step import ra_step as ra_step
from ._step import ra_step_info as ra_step_info
from ._step import random_subset as random_subset
from ._step import smjsre_advance as smjsre_advance
from ._step import smjsre_step as smjsre_step
from ._step import smjsre_step_info as smjsre_step_info
from ._step import wait_time as wait_time
from ._workload import Workload as Workload

# ---------------------------------------------------------------------------------------------
# Backward sub-perfect sampling, Palm metrics and the stability limit (issue #4).
# Algorithm 1 (Section 4.4) in ``_backward.py``, Section 6 metrics in ``_palm.py``, Theorem 5.1
# / Algorithm 2 / eq. (8) / Appendix A in ``_stability.py``.
# ---------------------------------------------------------------------------------------------
# isort: split
from .._tables import metrics_frame as metrics_frame
from ._backward import BackwardSamples as BackwardSamples
from ._backward import sample_backward as sample_backward
from ._palm import palm_metrics as palm_metrics
from ._palm import wait_density as wait_density
from ._palm import wait_samples as wait_samples
from ._stability import StabilityResult as StabilityResult
from ._stability import UnstableLoadError as UnstableLoadError
from ._stability import lambda_c_closed_form as lambda_c_closed_form
from ._stability import pile_growth as pile_growth

# ---------------------------------------------------------------------------------------------
# The exact FCFS MJQM for exponential services (issue #13): a level-dependent QBD.
# ---------------------------------------------------------------------------------------------
# isort: split
from ._exact import ExactResult as ExactResult
from ._exact import exact as exact
from ._exact import exact_lambda_c as exact_lambda_c
from ._exact import exact_size as exact_size

# ---------------------------------------------------------------------------------------------
# Scheduling policies beyond FCFS (issue #17): the event engine and the policies/ folder.
# ---------------------------------------------------------------------------------------------
# isort: split
from ._events import PolicyResult as PolicyResult
from ._events import saturated_throughput as saturated_throughput
from ._events import simulate_policy as simulate_policy
from ._limit import stability_limit as stability_limit
