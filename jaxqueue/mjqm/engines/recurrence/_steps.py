"""The recurrence engine's step objects, one per workload structure (``mjsre`` Section 9).

A step is an immutable ``eqx.Module`` with ``advance(W, alpha, sigma, tau, u) -> (X, wait,
hol)``: the job found the ascending workload vector ``W``, asks ``alpha`` servers for
``sigma``, the next job comes ``tau`` later; ``X`` is the next vector before the positive part
(``W_{n+1} = X^+``), ``wait`` the job's waiting time and ``hol`` the HOL idle times it causes
(``_step.py``). ``u`` are ``s`` uniforms for the steps that draw servers at random.
:func:`step_for` chooses the step from the policy and the workload: FCFS (eq. (2); eq. (15)
for several resource types; eq. (14) with specific servers) or random assignment
(Appendix A). Every driver (forward, backward, pile growth, the optimisation sampler) calls
the step it is given; the formulas live once, in ``_step.py``.
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ...policies import FCFS
from ...policies.random_assignment import RandomAssignment
from ._step import mjsre_advance, mmjsre_advance, smjsre_advance

__all__ = ["Step", "FCFSStep", "SpecificStep", "RandomStep", "step_for"]


class Step(eqx.Module):
    """One job of the recurrence on the ordered workload vector (module docstring)."""

    @abc.abstractmethod
    def advance(self, W, alpha, sigma, tau, u=None):
        """``(X, wait, hol)`` of one job (module docstring)."""

    @abc.abstractmethod
    def job_alpha(self, workload, cls, alpha):
        """The ``alpha`` this step advances with, for jobs of classes ``cls`` whose servers per
        resource type are ``alpha`` (``JobInputs.alpha``, ``(..., T)``)."""

    def n_extra(self, workload) -> int:
        """Uniforms per job beyond class, service and arrival (a random set of servers)."""
        return 0

    def step(self, W, alpha, sigma, tau, u=None):
        """The next workload vector ``X^+``."""
        return jnp.maximum(self.advance(W, alpha, sigma, tau, u)[0], 0)

    def merge(self, W, alpha, sigma, u=None):
        """The pile step of eq. (7): ``tau = 0`` and no positive part."""
        return self.advance(W, alpha, sigma, jnp.zeros((), W.dtype), u)[0]


class FCFSStep(Step):
    """First come, first served: the job takes the ``alpha`` least loaded servers as soon as they
    are free (eq. (2)); with several resource types (``sizes``, ``W`` their concatenation and
    ``alpha`` a ``(T,)`` vector) the same on every type at once (eq. (15))."""

    sizes: tuple[int, ...] = eqx.field(static=True)

    def advance(self, W, alpha, sigma, tau, u=None):
        if len(self.sizes) == 1:
            return mjsre_advance(W, alpha, sigma, tau)
        return mmjsre_advance(W, alpha, sigma, tau, self.sizes)

    def job_alpha(self, workload, cls, alpha):
        return alpha[..., 0] if len(self.sizes) == 1 else alpha


class SpecificStep(Step):
    """FCFS with specific servers (eq. (14)): ``alpha = (a, b)`` asks ``a`` arbitrary servers and
    ``b`` specific ones drawn uniformly from ``u``."""

    def advance(self, W, alpha, sigma, tau, u=None):
        return smjsre_advance(W, alpha[..., 0], alpha[..., 1], sigma, tau, u)

    def job_alpha(self, workload, cls, alpha):
        a = jnp.asarray(np.asarray(workload.cores, np.int32))[cls, 0]
        b = jnp.asarray(workload.specific, jnp.int32)[cls]
        return jnp.stack([a, b], axis=-1)

    def n_extra(self, workload) -> int:
        return workload.s


class RandomStep(Step):
    """Random assignment (Appendix A): the job takes ``alpha`` servers drawn uniformly from
    ``u`` (eq. (14) with ``alpha`` specific and no arbitrary servers)."""

    def advance(self, W, alpha, sigma, tau, u=None):
        return smjsre_advance(W, 0, alpha, sigma, tau, u)

    def job_alpha(self, workload, cls, alpha):
        return alpha[..., 0]

    def n_extra(self, workload) -> int:
        return workload.s


def step_for(policy, workload) -> Step:
    """The step of ``policy`` on ``workload``: :class:`FCFSStep` (``FCFS()``; one or several
    resource types), :class:`SpecificStep` (``FCFS()`` with specific servers) or
    :class:`RandomStep` (``RandomAssignment()``, one resource type).

    Raises:
        ValueError: a policy with no recurrence form, or random assignment on several types.
    """
    if isinstance(policy, RandomAssignment):
        if workload.n_types != 1:
            raise ValueError("policy random-assignment: needs a single resource type")
        return RandomStep()
    if not isinstance(policy, FCFS):
        label = getattr(policy, "label", type(policy).__name__)
        raise ValueError(
            f"policy {label}: no recurrence form on the ordered workload vector "
            "(the recurrence engine runs fcfs and random-assignment)"
        )
    if workload.specific is not None:
        return SpecificStep()
    return FCFSStep(tuple(int(x) for x in workload.servers))
