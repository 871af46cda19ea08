"""The result type shared by every balanced-fairness solver (generic and structured)."""

from __future__ import annotations

import equinox as eqx
from jaxtyping import Array, Float

from .._tables import bf_frame


class BFResult(eqx.Module):
    """Stationary metrics of a pool under balanced fairness (unit-mean exponential sizes).

    ``L``, ``T``, ``gamma`` are per class for the generic engine, and per class or per type for
    structured pools (see the solver's docstring). Fields a solver cannot compute are ``None``.

    Attributes:
        psi: probability that the system is empty, ``1 / sum_x Phi(x) lam^x``.
        log_inv_psi: ``log(1 / psi)``, computed directly (no underflow for large pools).
        L: mean number of jobs per class (or type), ``lam_i d log(1/psi) / d lam_i``.
        T: mean response time ``L / lam`` (Little's law).
        gamma: mean service rate ``lam / L = 1 / T`` (``bf-clusters`` eq. (9), sigma = 1).
        L_total: total mean number of jobs.
        T_mean: ``L_total / sum(lam)``.
        psi_server: probability that each server is idle (``None`` if not computed).
        psi_class: probability that each class has no job in the system (``None`` if not computed).
        busy_servers: mean number of busy servers (``None`` if not computed).
        stability_margin: largest factor by which ``lam`` can be scaled and stay stable
            (``min_L M(L) / Lambda(L)``; ``None`` if not computed).
    """

    psi: Float[Array, ""]
    log_inv_psi: Float[Array, ""]
    L: Float[Array, " n"]
    T: Float[Array, " n"]
    gamma: Float[Array, " n"]
    L_total: Float[Array, ""]
    T_mean: Float[Array, ""]
    psi_server: Float[Array, " K"] | None = None
    psi_class: Float[Array, " n"] | None = None
    busy_servers: Float[Array, ""] | None = None
    stability_margin: Float[Array, ""] | None = None

    def metrics(self) -> dict:
        """The metrics as a dict (the keys of ``jaxqueue bf solve --json``; arrays as they
        are)."""
        names = ("psi", "L", "T", "psi_server", "L_total", "T_mean", "gamma", "psi_class")
        return {k: getattr(self, k) for k in names} | {"busy_servers": self.busy_servers}

    def to_frame(self):
        """One row per class (per type for structured and typed pools): ``class``, ``L``,
        ``T``, ``gamma`` and, when computed, ``psi_class``; a batched result (``jax.vmap``)
        gets a ``point`` column. Needs pandas (``pip install 'jaxqueue[tables]'``)."""
        return bf_frame(self.metrics())
