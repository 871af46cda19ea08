"""Scheduling policies of the MJQM on the ordered workload vector (the policy layer).

A policy is an immutable ``eqx.Module`` (static configuration only) with one method,
``advance(W, alpha, sigma, tau, u) -> (X, wait, hol)``: the job found the ascending workload
vector ``W``, asks ``alpha`` servers for ``sigma``, the next job comes ``tau`` later; ``X`` is
the next vector before the positive part (``W_{n+1} = X^+``, the free idle time ``sum (-X)^+``),
``wait`` the job's waiting time and ``hol`` the vector of HOL idle times it causes (module
docstring of ``_step.py``). ``u`` are ``s`` uniforms for policies that draw servers at random.
``step`` (``X^+``) and ``merge`` (the pile step of eq. (7): ``tau = 0``, no positive part)
follow from ``advance``.

Every driver calls a policy and nothing else: the forward scan (``_forward.py``), the backward
sampler (``_backward.py``), pile growth (``_stability.py``) and the optimisation sampler
(``jaxqueue.optimize.MJQMSampler``). The step formulas live once, in ``_step.py``.

Policies: :class:`FCFSRecurrence` (eq. (2); several resource types: eq. (15); the event
engine's FCFS is :class:`jaxqueue.mjqm.policies.FCFS`), :class:`SpecificServers` (eq. (14):
``alpha = (arbitrary, specific)``) and :class:`RandomServers` (Appendix A).
A new policy on this state is one class here with its ``advance``.
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp

from ._step import mjsre_advance, mmjsre_advance, smjsre_advance

__all__ = ["Policy", "FCFSRecurrence", "SpecificServers", "RandomServers", "policy_for"]


class Policy(eqx.Module):
    """A scheduling policy on the ordered workload vector (module docstring)."""

    @abc.abstractmethod
    def advance(self, W, alpha, sigma, tau, u=None):
        """``(X, wait, hol)`` of one job (module docstring)."""

    def step(self, W, alpha, sigma, tau, u=None):
        """The next workload vector ``X^+``."""
        return jnp.maximum(self.advance(W, alpha, sigma, tau, u)[0], 0)

    def merge(self, W, alpha, sigma, u=None):
        """The pile step of eq. (7): ``tau = 0`` and no positive part."""
        return self.advance(W, alpha, sigma, jnp.zeros((), W.dtype), u)[0]


class FCFSRecurrence(Policy):
    """First come, first served: the job takes the ``alpha`` least loaded servers as soon as they
    are free (eq. (2)); with several resource types (``sizes``, ``W`` their concatenation and
    ``alpha`` a ``(T,)`` vector) the same on every type at once (eq. (15))."""

    sizes: tuple[int, ...] = eqx.field(static=True)

    def advance(self, W, alpha, sigma, tau, u=None):
        if len(self.sizes) == 1:
            return mjsre_advance(W, alpha, sigma, tau)
        return mmjsre_advance(W, alpha, sigma, tau, self.sizes)


class SpecificServers(Policy):
    """FCFS with specific servers (eq. (14)): ``alpha = (a, b)`` asks ``a`` arbitrary servers and
    ``b`` specific ones drawn uniformly from ``u``."""

    def advance(self, W, alpha, sigma, tau, u=None):
        return smjsre_advance(W, alpha[0], alpha[1], sigma, tau, u)


class RandomServers(Policy):
    """Random assignment (Appendix A): the job takes ``alpha`` servers drawn uniformly from
    ``u`` (eq. (14) with ``alpha`` specific and no arbitrary servers)."""

    def advance(self, W, alpha, sigma, tau, u=None):
        return smjsre_advance(W, 0, alpha, sigma, tau, u)


def policy_for(workload, variant: str = "fcfs") -> Policy:
    """The policy of a workload: ``"fcfs"`` (:class:`FCFSRecurrence`, or
    :class:`SpecificServers` when the workload has specific servers) or ``"random"``
    (:class:`RandomServers`)."""
    if variant == "random":
        return RandomServers()
    if variant != "fcfs":
        raise ValueError(f"variant must be 'fcfs' or 'random', got {variant!r}")
    if getattr(workload, "specific", None) is not None:
        return SpecificServers()
    return FCFSRecurrence(tuple(int(x) for x in workload.servers))
