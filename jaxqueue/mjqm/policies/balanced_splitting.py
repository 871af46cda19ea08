"""``balanced-splitting[:R0/R1/.../Rm-1+H | :psi=X]``: static partitions per class plus shared
helper servers (Chen, Anggraito, Olliaro, Marin, Ajmone Marsan, Berg and Grosof, 2025; NeDS-Lab's
mjqm-simulator calls it ``BalancedSplitting``), non-preemptive.

Without partitions, class ``c`` of need ``n_c`` and load share ``q_c / Q`` (``q_c = n_c p_c
E[S_c]``) gets ``R_c = n_c floor(psi (s / n_c) (q_c / Q))`` servers and the rest are helpers,
``H = s - sum R_c`` (the simulator's ``balanced_splitting_builder``, ``psi = 1`` by default;
``psi > 1``: every server a helper).
"""

from __future__ import annotations

import math

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..._jit import rows_sum, settle
from ._base import Jobs, Policy, cumsum


def default_partition(workload, psi: float = 1.0) -> tuple[tuple[int, ...], int]:
    """``(R, H)``: the partitions and helpers of the module docstring for ``workload``."""
    s = workload.s
    need = [int(a) for a in workload.cores_array[:, 0]]
    if psi > 1.0:
        return (0,) * len(need), s
    q = np.asarray(need, float) * np.asarray(workload.probs, float)
    q = q * np.asarray(workload.mean_service(), float)
    share = q / q.sum()
    pairs = zip(need, share, strict=True)
    reserve = tuple(int(math.floor(psi * (s / n) * f)) * n for n, f in pairs)
    return reserve, s - sum(reserve)


class BalancedSplitting(Policy):
    """Class ``c`` owns ``R_c`` servers, ``H`` helpers are shared (``sum R_c + H <= s``); a job
    runs in its class's partition or on the helpers (``Jobs.mark``) until it ends. The waiting
    jobs are scanned in arrival order: a job of class ``c`` starts in its partition if the
    partition is not blocked in this scan and has room; else the partition blocks and the job
    starts on the helpers if they are not blocked and have room; a job that fits on neither
    while its need is at most ``H`` blocks the helpers. Written ``R0/R1/.../Rm-1+H``, one
    ``R`` per class of the workload in its order (``+H`` may be left out: no helpers); bare
    or ``psi=X``, the partitions of the module docstring, set by :meth:`bind`."""

    reserve: tuple[int, ...] | None = eqx.field(static=True, default=None)
    helpers: int = eqx.field(static=True, default=0)
    psi: float = eqx.field(static=True, default=1.0)
    name = "balanced-splitting"
    backfills = True
    memory = True
    partitions = True

    def __check_init__(self):
        ok = self.reserve is None or (
            all(isinstance(r, int) and r >= 0 for r in self.reserve) and self.reserve
        )
        if not ok or not (isinstance(self.helpers, int) and self.helpers >= 0):
            raise ValueError(
                "policy balanced-splitting:R0/.../Rm-1+H needs integers >= 0, got "
                f"{self.reserve!r} + {self.helpers!r}"
            )
        if not (isinstance(self.psi, float) and 0.0 < self.psi < math.inf):
            raise ValueError(
                f"policy balanced-splitting:psi=X needs a number X > 0, got {self.psi!r}"
            )

    @property
    def label(self) -> str:
        if self.reserve is None:
            return self.name if self.psi == 1.0 else f"{self.name}:psi={self.psi:g}"
        return f"balanced-splitting:{'/'.join(map(str, self.reserve))}+{self.helpers}"

    def bind(self, workload) -> BalancedSplitting:
        if self.reserve is None:
            reserve, helpers = default_partition(workload, self.psi)
            bound = BalancedSplitting(reserve, helpers)
            try:
                return bound.bind(workload)
            except ValueError as e:
                raise ValueError(
                    f"policy {self.label}: the default partition (psi = {self.psi:g}: "
                    f"{bound.label}) does not fit this workload ({str(e).split(': ', 1)[-1]}); "
                    "give the partitions and helpers, as balanced-splitting:R0/.../Rm-1+H"
                ) from None
        if len(self.reserve) != workload.n_classes:
            raise ValueError(
                f"policy {self.label}: {len(self.reserve)} partitions for "
                f"{workload.n_classes} classes (one R per class)"
            )
        cores = [int(a) for a in workload.cores_array[:, 0]]
        for c, (r, a) in enumerate(zip(self.reserve, cores, strict=True)):
            if a > max(r, self.helpers):  # its jobs would never start
                raise ValueError(
                    f"policy {self.label}: class {c} needs {a} servers, more than its "
                    f"partition ({r}) and the helpers ({self.helpers})"
                )
        if sum(self.reserve) + self.helpers > workload.s:
            raise ValueError(f"policy {self.label}: partitions and helpers exceed s = {workload.s}")
        return self

    def _bound(self) -> tuple[int, ...]:
        if self.reserve is None:
            raise ValueError(f"policy {self.label}: bind(workload) first (its partitions)")
        return self.reserve

    def select(self, jobs: Jobs, s: int, needs):
        mark = jobs.mark if jobs.mark is not None else jnp.zeros_like(jobs.run)
        return self.step(jobs._replace(mark=mark), s, needs, jnp.zeros_like(jobs.count))[0]

    def step(self, jobs: Jobs, s: int, needs, state):
        # the scan in closed form: a partition (the helpers) blocks at its first job that does
        # not fit, so what starts there is the longest run whose cumulative need fits
        reserve = self._bound()
        run, helper = jobs.run, jobs.mark & jobs.run
        waiting = jobs.waiting
        # no job starts in an empty partition (a need is at least 1); the room left in each
        # partition and on the helpers: trees over the rows, materialised once
        classes = [c for c, r in enumerate(reserve) if r > 0]
        used_by = lambda x: rows_sum(jnp.where(x, jobs.need, 0), settled=False)  # noqa: E731
        *rooms, free_h = settle(
            *(reserve[c] - used_by((jobs.cls == c) & run & ~helper) for c in classes),
            self.helpers - used_by(helper),
        )
        part = jnp.zeros_like(run)
        for c, room in zip(classes, rooms, strict=True):
            mine = waiting & (jobs.cls == c)
            part = part | (mine & (cumsum(jnp.where(mine, jobs.need, 0)) <= room))
        (part,) = settle(part)  # the helpers' cumulative sum would recompute it per term
        tries = waiting & ~part & (jobs.need <= self.helpers)  # a job too big never blocks
        help_ = tries & (cumsum(jnp.where(tries, jobs.need, 0)) <= free_h)
        return run | part | help_, jnp.where(run, helper, help_), state

    def closed_form_limit(self, workload) -> float | None:
        """Without helpers, class ``c`` runs FCFS on its own ``k_c = floor(R_c / n_c)`` slots
        (its partition blocks at its first job that does not fit): a ``G/G/k_c`` queue fed at
        rate ``lam p_c``, stable iff ``lam p_c E[S_c] < k_c``, so the limit is ``min_c k_c /
        (p_c E[S_c])``. With helpers no closed form."""
        if self.reserve is None:
            reserve, helpers = default_partition(workload, self.psi)
        else:
            reserve, helpers = self.reserve, self.helpers
        if helpers or len(reserve) != workload.n_classes:
            return None
        need = [int(a) for a in workload.cores_array[:, 0]]
        probs = np.asarray(workload.probs, float)
        means = np.asarray(workload.mean_service(), float)
        rows = zip(reserve, need, probs, means, strict=True)
        limits = [(r // n) / (p * m) for r, n, p, m in rows if p > 0]
        return float(min(limits)) if limits and min(limits) > 0 else None
