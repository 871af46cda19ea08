"""``balanced-splitting:R0/R1/.../Rm-1+H``: static partitions per class plus shared helper
servers (Chen, Anggraito, Olliaro, Marin, Ajmone Marsan, Berg and Grosof, 2025; NeDS-Lab's
mjqm-simulator calls it ``BalancedSplitting``), non-preemptive."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jax import lax

from ._base import Jobs, Policy, at_slot, positions


class BalancedSplitting(Policy):
    """Class ``c`` owns ``R_c`` servers, ``H`` helpers are shared (``sum R_c + H <= s``); a job
    runs in its class's partition or on the helpers (``Jobs.mark``) until it ends. The waiting
    jobs are scanned in arrival order: a job of class ``c`` starts in its partition if the
    partition is not blocked in this scan and has room; else the partition blocks and the job
    starts on the helpers if they are not blocked and have room; a job that fits on neither
    while its need is at most ``H`` blocks the helpers. Written ``R0/R1/.../Rm-1+H``, one
    ``R`` per class of the workload in its order (``+H`` may be left out: no helpers)."""

    reserve: tuple[int, ...] = eqx.field(static=True)
    helpers: int = eqx.field(static=True, default=0)
    name = "balanced-splitting"
    backfills = True
    memory = True

    def __check_init__(self):
        ok = all(isinstance(r, int) and r >= 0 for r in self.reserve) and self.reserve
        if not ok or not (isinstance(self.helpers, int) and self.helpers >= 0):
            raise ValueError(
                "policy balanced-splitting:R0/.../Rm-1+H needs integers >= 0, got "
                f"{self.reserve!r} + {self.helpers!r}"
            )

    @property
    def label(self) -> str:
        return f"balanced-splitting:{'/'.join(map(str, self.reserve))}+{self.helpers}"

    def bind(self, workload) -> BalancedSplitting:
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

    def select(self, jobs: Jobs, s: int, needs):
        mark = jobs.mark if jobs.mark is not None else jnp.zeros_like(jobs.run)
        return self.step(jobs._replace(mark=mark), s, needs, jnp.zeros_like(jobs.count))[0]

    def step(self, jobs: Jobs, s: int, needs, state):
        C = len(self.reserve)
        run, helper = jobs.run, jobs.mark & jobs.run
        used = jnp.where(run & ~helper, jobs.need, 0)
        free = jnp.stack(
            [
                r - jnp.sum(jnp.where(jobs.cls == c, used, 0), axis=0)
                for c, r in enumerate(self.reserve)
            ]
        )
        free_h = self.helpers - jnp.sum(jnp.where(helper, jobs.need, 0), axis=0)
        pos = positions(jobs.need)
        waiting = jobs.waiting

        def scan(b, c):  # job b of the arrival order
            free, free_h, blocked, blocked_h, start, on_h = c
            cls, need, w = at_slot(jobs.cls, b), at_slot(jobs.need, b), at_slot(waiting, b) > 0
            hit = jnp.arange(C)[:, None] == cls[None]
            room = jnp.sum(jnp.where(hit, free, 0), axis=0)
            blk = jnp.any(hit & blocked, axis=0)
            part = w & ~blk & (need <= room)
            help_ = w & ~part & ~blocked_h & (need <= free_h)
            free = free - jnp.where(hit & part[None], need[None], 0).astype(free.dtype)
            blocked = blocked | (hit & (w & ~part)[None])
            free_h = free_h - jnp.where(help_, need, 0).astype(free_h.dtype)
            blocked_h = blocked_h | (w & ~part & ~help_ & (need <= self.helpers))
            here = pos == b
            return (
                free,
                free_h,
                blocked,
                blocked_h,
                start | (here & (part | help_)),
                on_h | (here & help_),
            )

        z = jnp.zeros_like(run)
        init = (free, free_h, jnp.zeros_like(free, bool), jnp.zeros_like(free_h, bool), z, z)
        out = lax.fori_loop(0, jobs.need.shape[0], scan, init)
        return run | out[4], jnp.where(run, helper, out[5]), state
