"""The front door of MJQM simulation: one call for every policy, the engine chosen for it.

A policy with a form on the ordered workload vector (``recurrence = True``: ``FCFS``,
``RandomAssignment``) runs on the recurrence engine (``mjsre`` eq. (2), the forward scan of
Section 7.4; it also takes several resource types and specific servers); every other policy
runs on the event engine (job lists). ``engine="events"`` runs FCFS on the event engine too
(the same queue, another estimator: a cross-check).
"""

from __future__ import annotations

import inspect

from .engines import events, recurrence
from .policies import Policy, parse_policy

_ENGINES = ("auto", "recurrence", "events")


def _engine_of(policy: Policy, engine: str) -> str:
    if engine not in _ENGINES:
        raise ValueError(f"engine must be one of {_ENGINES}, got {engine!r}")
    if engine == "recurrence" and not policy.recurrence:
        raise ValueError(
            f"policy {policy.label} has no form on the ordered workload vector; "
            "it runs on the event engine (engine='auto' or 'events')"
        )
    if engine == "events" and not policy.job_list:
        raise ValueError(f"policy {policy.label} runs on the recurrence engine only")
    if engine == "auto":
        return "recurrence" if policy.recurrence else "events"
    return engine


def simulate(workload, lam, policy: str | Policy | None = None, *, key, engine="auto", **options):
    """Simulate the MJQM at arrival rate ``lam`` under ``policy`` (default FCFS).

    Args:
        workload: a :class:`~jaxqueue.mjqm.Workload`.
        lam: arrival rate; refused at or beyond ``lambda_ideal``, a closed form or ``limit``
            (a :func:`~jaxqueue.mjqm.stability_limit` result passed in ``options``).
        policy: a policy object of :mod:`jaxqueue.mjqm.policies` or its command-line name
            (``"window:4"``); ``None`` is FCFS.
        key: PRNG key: job ``n`` of replication ``r`` depends on ``(key, r, n)`` only.
        engine: ``"auto"`` (the recurrence engine where the policy has a recurrence form, else
            the event engine), ``"recurrence"`` or ``"events"``.
        **options: the chosen engine's options (``n_jobs``, ``n_replications``, ``warmup``,
            ``dtype``, ``level``, ``execution`` (a :class:`~jaxqueue.mjqm.options.Execution`:
            the devices, and each engine's memory layout), ``limit``, ``override``,
            ``throw``, ``progress`` (a ``callable(str)`` told how the run goes), and those
            of one engine only: :func:`jaxqueue.mjqm.engines.recurrence.simulate` (``init``,
            ``histogram``), :func:`jaxqueue.mjqm.engines.events.simulate` (``max_buffer``)).

    Returns:
        :class:`~jaxqueue.mjqm.ForwardResult` from the recurrence engine,
        :class:`~jaxqueue.mjqm.PolicyResult` from the event engine; both with a ``status``.

    Raises:
        ValueError: an unknown policy or engine, an option the chosen engine does not take,
            or an input the engine refuses.
    """
    pol = parse_policy("fcfs" if policy is None else policy)
    chosen = _engine_of(pol, engine)
    run = recurrence.simulate if chosen == "recurrence" else events.simulate
    # the event engine's one-rate call takes the options of its several-rate call
    spec = recurrence.simulate if chosen == "recurrence" else events.simulate_loads
    accepted = {*inspect.signature(spec).parameters, "throw"}
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"simulate: option {', '.join(unknown)} does not apply to the {chosen} engine "
            f"(policy {pol.label})"
        )
    return run(workload, lam, pol, key=key, **options)
