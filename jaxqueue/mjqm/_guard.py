"""Refuse arrival rates at or beyond a known stability limit of the MJQM.

Known limits (``papers/mjsre.md`` Section 5): ``lambda_ideal = min_t s_t / E[alpha_t sigma]``
always bounds ``lambda_c`` from above; when some jobs ask for all servers and all the others
for one server with exponential (or deterministic) service times, eq. (8) gives ``lambda_c``
in closed form (:func:`lambda_c_closed_form`). Other limits are estimated by the stability
estimator (Algorithm 2), which may extend :func:`known_limit`.
"""

from __future__ import annotations

import math

import numpy as np

from ..dist import Deterministic, Exponential
from ._workload import Workload

__all__ = ["check_load", "known_limit", "lambda_c_closed_form"]


def lambda_c_closed_form(workload: Workload) -> float | None:
    """``lambda_c = 1 / gamma`` from eq. (8) when it has a closed form, else ``None``.

    Applies to one resource type, no specific servers, every class asking for ``1`` or ``s``
    servers, with at least one global class and the one-server classes sharing one exponential
    or one deterministic law. A cycle is a global job followed by ``K ~ Geometric(p_g)``
    one-server jobs (``P(K = k) = (1 - p_g)^k p_g``); the next global job waits for the pile
    ``M_K`` of those ``K`` jobs started together on ``s`` servers, so
    ``gamma = p_g (E[sigma_g] + E[M_K])`` with (``q = 1 - p_g``, small mean ``m``)

    * exponential: ``E[M_K] = m (q^(s+1) / (p_g s) + sum_{j=1}^{s} q^j / j)``
      (``(K - s)^+`` departures at rate ``s / m``, then the maximum of ``min(K, s)``
      exponentials);
    * deterministic: ``E[M_K] = m E[ceil(K / s)] = m q / (1 - q^s)``.

    Returns:
        The limit as a float, or ``None`` when the case does not apply.
    """
    if workload.n_types != 1 or workload.specific is not None:
        return None
    s = workload.servers[0]
    cores = np.asarray(workload.cores)[:, 0]
    probs = np.asarray(workload.probs, dtype=float)
    means = np.asarray(workload.mean_service(), dtype=float)
    glob = cores == s
    if not glob.any() or not np.all(glob | (cores == 1)):
        return None
    pg = float(probs[glob].sum())
    eg = float((probs[glob] * means[glob]).sum() / pg)
    small = [law for law, g in zip(workload.services, glob, strict=True) if not g]
    if pg >= 1.0 - 1e-15 or not small:
        return 1.0 / eg
    q = 1.0 - pg
    types = {type(law) for law in small}
    m_small = {float(law.mean()) for law in small}
    if len(types) != 1 or len(m_small) != 1:
        return None
    m = m_small.pop()
    if types == {Exponential}:
        j = np.arange(1, s + 1)
        e_mk = m * (q ** (s + 1) / (pg * s) + float(np.sum(q**j / j)))
    elif types == {Deterministic}:
        e_mk = m * q / (1.0 - q**s)
    else:
        return None
    return 1.0 / (pg * (eg + e_mk))


def known_limit(workload: Workload) -> tuple[float, str]:
    """The tightest stability limit known without estimation, and where it comes from."""
    ideal = float(workload.lambda_ideal())
    closed = lambda_c_closed_form(workload)
    if closed is not None and closed <= ideal:
        return closed, "lambda_c, eq. (8) closed form"
    return ideal, "lambda_ideal = min_t s_t / E[alpha_t sigma] (no HOL blocking)"


def check_load(workload: Workload, lam, *, override: bool = False) -> float:
    """Validate an arrival rate before simulating (Python, before tracing).

    Args:
        workload: the model.
        lam: arrival rate (a concrete number).
        override: skip the stability check (``lam`` must still be finite and > 0), e.g. to
            simulate a transient.

    Returns:
        ``lam`` as a float.

    Raises:
        ValueError: if ``lam`` is not a finite positive number, or (unless ``override``) it is at
            or beyond a known stability limit; the message reports the limit. For one resource
            type without specific servers, loads above ``1 / E[sigma]`` are also checked
            against the estimated ``lambda_c`` (``_stability.require_stable``: refused when
            not below the lower end of its confidence interval).
    """
    try:
        lam_f = float(lam)
    except (TypeError, ValueError):
        raise ValueError(f"lam must be a number, got {lam!r}") from None
    if not math.isfinite(lam_f) or lam_f <= 0:
        raise ValueError(f"lam (arrival rate) must be finite and > 0, got {lam!r}")
    if not override:
        limit, what = known_limit(workload)
        if lam_f >= limit:
            label = f" {workload.name!r}" if workload.name else ""
            raise ValueError(
                f"lam={lam_f:.6g} is at or beyond the stability limit {limit:.6g} of "
                f"workload{label} ({what}); the queue would grow without bound. "
                "Use a smaller lam (or override=True for a transient run)."
            )
        if workload.n_types == 1 and workload.specific is None:
            # Estimated lambda_c (Algorithm 2, cached per workload; issue #4, _stability.py).
            from ._stability import require_stable

            require_stable(workload, lam_f)
    return lam_f
