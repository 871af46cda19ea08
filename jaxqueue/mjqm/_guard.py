"""Refuse arrival rates at or beyond a known stability limit of the MJQM.

Known limits (``mjsre`` Section 5): ``lambda_ideal = min_t s_t / E[alpha_t sigma]``
always bounds ``lambda_c`` from above; when some jobs ask for all servers and all the others
for one server with exponential (or deterministic) service times, eq. (8) gives ``lambda_c``
in closed form (``_stability.lambda_c_closed_form``). Beyond those, ``check_load`` asks
``_stability.require_stable`` (the exact QBD limit for exponential services, else a
pile-growth estimate drawn with the key the caller passes: an explicit Monte Carlo).
"""

from __future__ import annotations

import math

from ._stability import guard_key, lambda_c_closed_form, require_stable
from ._workload import Workload

__all__ = ["check_load", "known_limit"]


def known_limit(workload: Workload) -> tuple[float, str]:
    """The tightest stability limit known without estimation, and where it comes from."""
    ideal = float(workload.lambda_ideal())
    closed = lambda_c_closed_form(workload)
    if closed is not None and closed <= ideal:
        return closed, "lambda_c, eq. (8) closed form"
    return ideal, "lambda_ideal = min_t s_t / E[alpha_t sigma] (no HOL blocking)"


def check_load(workload: Workload, lam, *, key=None, override: bool = False) -> float:
    """Validate an arrival rate before simulating (Python, before tracing).

    Args:
        workload: the model.
        lam: arrival rate (a concrete number).
        key: PRNG key of the caller (simulation or sampling): for one resource type without
            specific servers, loads above ``1 / E[sigma]`` are checked against ``lambda_c``,
            exact for exponential services, else estimated by pile growth with
            ``_stability.guard_key(key)``. Without a key only exact limits are checked.
        override: skip the stability check (``lam`` must still be finite and > 0), e.g. to
            simulate a transient.

    Returns:
        ``lam`` as a float.

    Raises:
        ValueError: if ``lam`` is not a finite positive number, or (unless ``override``) it is at
            or beyond a known stability limit; the message reports the limit, or the estimate
            and its interval (refused when not below its lower end).
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
            require_stable(workload, lam_f, key=None if key is None else guard_key(key))
    return lam_f
