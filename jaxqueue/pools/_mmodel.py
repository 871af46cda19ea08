"""Closed forms for the M model (3 servers; class 1 on servers {1, 3}, class 2 on {2, 3})."""

from __future__ import annotations

import jax.numpy as jnp

from ._result import BFResult


def m_model(lam1, lam2, mu1=1.0, mu2=1.0, mu3=1.0) -> BFResult:
    """Exact balanced-fairness metrics of the M model in closed form.

    Empty probability and total mean number (``bf-recursive`` Section 3.4)::

        psi = (1 - rho) mu / mu',
        mu' = mu1 (mu2 + mu3) / (mu2 + mu3 - lam2) + mu2 (mu1 + mu3) / (mu1 + mu3 - lam1) + mu3,

    and per-class mean service rates ``gamma_1``, ``gamma_2`` (``bf-clusters`` eqs. (10)-(11)),
    ``T_i = 1 / gamma_i``, ``L_i = lam_i / gamma_i``. Server idle probabilities
    ``psi_k = psi / psi_{|-k}`` with ``psi_{|-1} = 1 - lam2 / (mu2 + mu3)``,
    ``psi_{|-2} = 1 - lam1 / (mu1 + mu3)``, ``psi_{|-3} = 1``. ``mu2 = 0`` gives the asymmetric
    M model (class 2 on server 3 only); then ``psi_server[1]`` is 1 by convention. Class idle
    probabilities ``psi_i = psi / psi_{|-i}`` with the system without class ``i`` an M/M/1
    queue: ``psi_{|-1} = 1 - lam2 / (mu2 + mu3)``, ``psi_{|-2} = 1 - lam1 / (mu1 + mu3)``.

    Stability: ``lam1 < mu1 + mu3``, ``lam2 < mu2 + mu3``, ``lam1 + lam2 < mu1 + mu2 + mu3``
    (not checked here; :func:`jaxqueue.pools.solve` checks).

    Returns:
        :class:`BFResult` with per-class ``L``, ``T``, ``gamma`` and ``psi_server`` (3 servers).
    """
    lam1, lam2, mu1, mu2, mu3 = (jnp.asarray(v) for v in (lam1, lam2, mu1, mu2, mu3))
    mu = mu1 + mu2 + mu3
    rho = (lam1 + lam2) / mu
    mu_p = mu1 * (mu2 + mu3) / (mu2 + mu3 - lam2) + mu2 * (mu1 + mu3) / (mu1 + mu3 - lam1) + mu3
    psi = (1 - rho) * mu / mu_p
    rho1 = lam1 / (mu1 + mu3)
    rho2 = lam2 / (mu2 + mu3)
    den = mu - (mu1 + mu3) * rho1 - (mu2 + mu3) * rho2 + mu3 * rho1 * rho2
    inv_g1 = 1 / (mu * (1 - rho)) + (mu2 / (mu1 + mu3)) * ((1 - rho2) / (1 - rho1)) / den
    inv_g2 = 1 / (mu * (1 - rho)) + (mu1 / (mu2 + mu3)) * ((1 - rho1) / (1 - rho2)) / den
    T = jnp.stack([inv_g1, inv_g2])
    lam = jnp.stack([lam1, lam2])
    L = lam * T
    psi_m1 = 1 - rho2
    psi_m2 = 1 - rho1
    psi_server = jnp.stack([psi / psi_m1, jnp.where(mu2 > 0, psi / psi_m2, 1.0), psi])
    L_total = jnp.sum(L)
    return BFResult(
        psi=psi,
        log_inv_psi=-jnp.log(psi),
        L=L,
        T=T,
        gamma=1 / T,
        L_total=L_total,
        T_mean=L_total / (lam1 + lam2),
        psi_server=psi_server,
        psi_class=jnp.stack([psi / psi_m1, psi / psi_m2]),
        busy_servers=jnp.sum(jnp.where(jnp.stack([mu1, mu2, mu3]) > 0, 1 - psi_server, 0.0)),
        stability_margin=jnp.minimum(1 / rho, jnp.minimum(1 / rho1, 1 / rho2)),
    )


def m_model_total_L(lam1, lam2, mu1=1.0, mu2=1.0, mu3=1.0):
    """Total mean number of jobs of the M model by ``bf-recursive`` Section 3.4 (eq. (16))::

    L = rho / (1 - rho) + psi / (mu (1 - rho)) [lam2 mu1 (mu2 + mu3) / (mu2 + mu3 - lam2)^2
                                                + lam1 mu2 (mu1 + mu3) / (mu1 + mu3 - lam1)^2].
    """
    r = m_model(lam1, lam2, mu1, mu2, mu3)
    mu = mu1 + mu2 + mu3
    rho = (lam1 + lam2) / mu
    extra = (
        lam2 * mu1 * (mu2 + mu3) / (mu2 + mu3 - lam2) ** 2
        + lam1 * mu2 * (mu1 + mu3) / (mu1 + mu3 - lam1) ** 2
    )
    return rho / (1 - rho) + r.psi / (mu * (1 - rho)) * extra
