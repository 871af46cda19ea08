"""The recurrence engine on given job inputs: one replication's jobs fed one after the other
to the engine's step (``mjsre`` eq. (2); eq. (14), (15), Appendix A by the step object), in a
``lax.scan`` that ``jit``, ``vmap`` and autodiff go through (the optimisation sampler)."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..._inputs import JobInputs
from ._steps import step_for

__all__ = ["run_jobs"]


def run_jobs(workload, policy, inputs: JobInputs, W0=None):
    """Feed the jobs ``inputs`` (leading axis the jobs, in arrival order; ``extra`` holding
    ``s`` uniforms per job where the step draws servers) to the step of ``policy`` on
    ``workload``, from ``W0`` (default: empty).

    Returns:
        ``(W, waits)``: the workload vector found by the next job and each job's wait.

    Raises:
        ValueError: a policy with no recurrence form.
    """
    step = step_for(policy, workload)
    alpha = step.job_alpha(workload, inputs.cls, inputs.alpha)
    xs = (alpha, inputs.sigma, inputs.tau)
    if step.n_extra(workload):
        xs = (*xs, inputs.extra)
    if W0 is None:
        W0 = jnp.zeros((workload.s,), inputs.sigma.dtype)

    def one(W, x):
        X, wait, _ = step.advance(W, *x)
        return jnp.maximum(X, 0), wait

    return lax.scan(one, W0, xs)
