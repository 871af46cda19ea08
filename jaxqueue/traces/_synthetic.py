"""Job logs made from a workload (:func:`synthetic`: the package's own job inputs, as every
simulator draws them) and written in the Standard Workload Format (:func:`write_swf`): the
logs whose workload is known, for testing a fit and a replay."""

from __future__ import annotations

import os
import types

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..mjqm import Workload, job_uniforms, jobs_from_uniforms, n_uniforms
from ._read import JobLog, _frozen

__all__ = ["synthetic", "write_swf"]


def synthetic(workload: Workload, lam: float, n_jobs: int, *, key, rep: int = 0) -> JobLog:
    """A log of ``n_jobs`` jobs of ``workload`` at arrival rate ``lam``: job ``n`` is job ``n``
    of replication ``rep`` of every simulator given ``key`` (class, cores, service time,
    inter-arrival time: ``mjqm.jobs_from_uniforms``), the first arriving at time 0. No wait
    is recorded (``wait`` is ``nan``); ``servers`` is the workload's.

    Examples:
        >>> wl = scenarios.get("five-class-exp")  # doctest: +SKIP
        >>> log = synthetic(wl, 0.5, 1000, key=jax.random.key(0))  # doctest: +SKIP
    """
    if workload.n_types != 1 or workload.specific is not None:
        raise ValueError("synthetic: one resource type without specific servers")
    if not (isinstance(n_jobs, (int, np.integer)) and n_jobs >= 1):
        raise ValueError(f"synthetic: n_jobs must be an integer >= 1, got {n_jobs!r}")
    dt = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    n_u = n_uniforms(workload)  # concrete: outside the compiled function
    args = (workload, jnp.asarray(lam, dt), key, jnp.asarray(rep), jnp.arange(n_jobs), n_u, dt)
    # a renewal arrival law is rescaled from concrete values: drawn an operation at a time
    jobs = _draw(*args) if workload.arrival is None else _inputs(*args)
    tau = np.asarray(jobs.tau, dtype=np.float64)
    submit = np.concatenate([[0.0], np.cumsum(tau[:-1])])
    n = int(n_jobs)
    nan = np.full(n, np.nan)
    return JobLog(
        path=f"<synthetic {workload.name or 'workload'} lam={lam:g}>",
        format="synthetic",
        servers=int(workload.s),
        servers_from="workload",
        header=types.MappingProxyType({}),
        line=_frozen(np.arange(1, n + 1)),
        job=_frozen(np.arange(1, n + 1)),
        submit=_frozen(submit),
        wait=_frozen(nan),
        runtime=_frozen(np.asarray(jobs.sigma, dtype=np.float64)),
        cores=_frozen(np.asarray(jobs.alpha[..., 0], dtype=np.int64)),
        requested_cores=_frozen(np.asarray(jobs.alpha[..., 0], dtype=np.int64)),
        requested_time=_frozen(nan),
        status=_frozen(np.ones(n, np.int64)),
        user=_frozen(np.full(n, -1, np.int64)),
    )


def _inputs(workload, lam, key, rep, jobs, n_u, dtype):
    """The job inputs of ``jobs``."""
    u = job_uniforms(key, rep, jobs, n_u, dtype)
    return jobs_from_uniforms(workload, lam, u, dtype=dtype)


_draw = eqx.filter_jit(_inputs)  # one compiled function, not an operation at a time


def write_swf(log: JobLog, path, *, wait=None, comment: str = "") -> None:
    """Write ``log`` as an SWF file (times with 17 significant digits, so a read gives the
    same numbers back), with ``; MaxProcs:`` when the machine size is known and ``wait``
    (each job's wait, e.g. a replay's) in place of the log's own."""
    w = log.wait if wait is None else np.asarray(wait, dtype=np.float64)
    if w.shape != log.submit.shape:
        raise ValueError(f"write_swf: wait must have one value per job ({len(log)})")

    def num(x):
        return "-1" if not np.isfinite(x) else repr(float(x)) if x != int(x) else str(int(x))

    head = ["; Version: 2.2", f"; Note: written by jaxqueue.traces.write_swf {comment}".rstrip()]
    if log.servers is not None:
        head.append(f"; MaxProcs: {log.servers}")
    rows = []
    for j in range(len(log)):
        c = int(log.cores[j])
        fields = [
            str(int(log.job[j])),
            num(log.submit[j]),
            num(w[j]),
            num(log.runtime[j]),
            str(c),
            "-1",
            "-1",
            str(int(log.requested_cores[j])),
            num(log.requested_time[j]),
            "-1",
            str(int(log.status[j])),
            str(int(log.user[j])),
        ] + ["-1"] * 6
        rows.append(" ".join(fields))
    with open(os.fspath(path), "w", encoding="utf-8") as f:
        f.write("\n".join(head + rows) + "\n")
