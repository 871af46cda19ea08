"""``server-filling-gittins``: ServerFilling on the queue in order of Gittins rank (Grosof,
Scully, Harchol-Balter and Scheller-Wolf, "Optimal scheduling in the multiserver-job model
under heavy traffic", POMACS 6(3), 2022, Section 4: ServerFilling-Gittins), for sizes unknown
but of known law: a job's rank is its need times the Gittins rank of its class's service law
at its attained service (:mod:`._gittins`)."""

from __future__ import annotations

import jax.numpy as jnp

from . import _gittins
from ._base import Jobs, Order, Policy, in_key_order
from .server_filling import ServerFilling, fill_prefix


class ServerFillingGittins(Policy):
    """Preemptive: order the jobs in the system by ``need x r_c(a)`` (``r_c`` the Gittins rank
    of class ``c``'s service law, ``a`` the service the job has had; arrival order on ties),
    take the shortest prefix in that order whose needs sum to at least ``s`` (or all of them)
    and serve its jobs largest need first (that order within a need), each one that fits.
    Decided at arrivals and departures (a rank that changes with age between two events does
    not preempt). Exponential laws give a constant rank (need x mean). Stability limit as
    server-filling: ``lambda_ideal`` when the needs and ``s`` form a divisibility chain.

    ``laws``, ``grids``: the class laws and their rank grids (:mod:`._gittins`), read from a
    workload by :meth:`bind` (the engine binds it; ``select`` needs them)."""

    laws: tuple | None = None
    grids: tuple | None = None
    name = "server-filling-gittins"
    preemptive = True
    backfills = True
    size_aware = True  # attained service: size minus remaining work
    order = Order.GITTINS

    def bind(self, workload) -> ServerFillingGittins:
        laws = tuple(workload.services)
        return ServerFillingGittins(laws, tuple(_gittins.table(law) for law in laws))

    def select(self, jobs: Jobs, s: int, needs):
        if self.laws is None or jobs.size is None:
            raise ValueError("server-filling-gittins: bind(workload) first, and give job sizes")
        attained = jobs.size - jobs.rem
        key = jnp.zeros_like(jobs.rem)
        for k, (law, grid) in enumerate(zip(self.laws, self.grids, strict=True)):
            key = jnp.where(jobs.cls == k, _gittins.rank(law, grid, attained), key)
        fill = lambda live, need, before: fill_prefix(live, need, s, needs, before)  # noqa: E731
        return in_key_order(jobs.need * key, jobs.live, jobs.need, fill)

    def closed_form_limit(self, workload) -> float | None:
        return ServerFilling().closed_form_limit(workload)
