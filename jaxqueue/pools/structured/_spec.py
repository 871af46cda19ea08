"""Pool-structure specifications (``random:K=100,d=10`` ...): read them (:func:`parse_spec`)
and solve them (:func:`solve_spec`)."""

from __future__ import annotations

import math

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..._document import spec_items, spec_numbers
from .._result import BFResult
from ._common import is_concrete
from ._local import HomogeneousLine, HomogeneousRing
from ._random import RandomAssignment

#: Largest line for which :func:`solve_spec` returns per-class metrics (``O(K^3)`` time,
#: ``O(K^2)`` memory); above it the line is solved for the whole pool in ``O(K^2)``.
PER_CLASS_LINE_MAX_K = 400


_KINDS = ("random", "line", "ring")
_KEYS = {"random": ("K", "d", "p", "mu"), "line": ("K", "d", "mu"), "ring": ("K", "d", "mu")}
_EXAMPLES = "random:K=100,d=10 | random:K=100,d=6+12,p=0.5+0.5 | line:K=100,d=10 | ring:K=100,d=10"


def parse_spec(spec: str) -> tuple[str, dict]:
    """Parse a pool structure ``KIND:key=value,...`` into ``(kind, params)``.

    Kinds: ``random`` (keys ``K``, ``d``, optional ``p``, ``mu``; ``d`` and ``p`` may list
    several types joined by ``+``), ``line`` and ``ring`` (keys ``K``, ``d``, optional ``mu``).
    ``params`` maps each key to its list of values.

    Raises:
        ValueError: unknown kind or key, a missing or malformed value (the message shows the
            accepted forms).
    """
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"pool spec must look like {_EXAMPLES}; got {spec!r}")
    kind = spec.partition(":")[0].strip().lower()
    if kind not in _KINDS:
        raise ValueError(f"unknown pool structure {kind!r} in {spec!r}; known: {list(_KINDS)}")
    params: dict = {}
    for key, val in spec_items(spec, kind, _KEYS[kind]).items():
        conv = int if key in ("K", "d") else float
        params[key] = spec_numbers(val, "+", conv, key, spec, _EXAMPLES)
        if (key in ("K", "mu") or (kind != "random" and key == "d")) and len(params[key]) != 1:
            raise ValueError(f"{key} takes one value for {kind} pools in {spec!r}, got {val!r}")
    for need in ("K", "d"):
        if need not in params:
            raise ValueError(f"pool spec {spec!r} lacks {need}=...; e.g. {_EXAMPLES}")
    _check_structure(spec, params)
    return kind, params


def _check_structure(spec: str, params: dict) -> None:
    K = params["K"][0]
    if K < 1:
        raise ValueError(f"K must be >= 1 in {spec!r}, got {K}")
    if any(not 1 <= x <= K for x in params["d"]):
        raise ValueError(f"degrees must lie in [1, K={K}] in {spec!r}, got d={params['d']}")
    if "p" in params:
        if len(params["p"]) != len(params["d"]):
            raise ValueError(
                f"p must give one share per degree in {spec!r}: {len(params['d'])} degrees, "
                f"{len(params['p'])} shares"
            )
        p = np.asarray(params["p"])
        if np.any(p < 0) or not abs(p.sum() - 1.0) <= 1e-6:
            raise ValueError(
                f"p must be shares >= 0 summing to 1 in {spec!r}, got sum {p.sum():.6g} (used "
                "as given, never rescaled)"
            )
    if "mu" in params and not params["mu"][0] > 0:
        raise ValueError(f"mu must be > 0 in {spec!r}")


def _rho_from(kind: str, K: int, mu: float, rho, lam, n_types: int):
    """Total load and, if given, per-type (random) or per-class (line / ring) rates."""
    if (rho is None) == (lam is None):
        raise ValueError("give exactly one of rho (total load) or lam (arrival rates)")
    if rho is not None:
        r = float(rho)
        if not np.isfinite(r) or r < 0:
            raise ValueError(f"rho must be finite and >= 0, got {rho!r}")
        return r, None
    lam_a = np.atleast_1d(np.asarray(lam, dtype=float))
    if lam_a.ndim != 1 or not np.all(np.isfinite(lam_a)) or np.any(lam_a < 0):
        raise ValueError(f"lam must be finite, >= 0, a number or a 1-d list; got {lam!r}")
    r = float(lam_a.sum() / (K * mu))
    if lam_a.size == 1:
        return r, None
    return r, lam_a


def solve_spec(spec: str, *, rho: float | None = None, lam=None) -> tuple[BFResult, dict]:
    """Solve a structured pool given by a spec string (the ``jaxqueue bf solve --pool`` form).

    Specs: ``random:K=100,d=10`` (eq. (17), metrics per type: one type),
    ``random:K=100,d=6+12,p=0.5+0.5`` (heterogeneous degrees, Section 4.2: ``L``, ``T`` per
    type; ``p`` defaults to equal shares), ``line:K=100,d=10`` (Proposition 6; per class when
    ``K <=`` :data:`PER_CLASS_LINE_MAX_K`, else for the whole pool), ``ring:K=100,d=10`` (eq. (28);
    all ``K`` classes equivalent, per class ``L / K``). Optional ``mu=`` (server capacity, 1).

    Args:
        spec: the structure.
        rho: total arrival rate over total capacity ``K mu``.
        lam: instead of ``rho``: the total arrival rate (a number), or the rates per type
            (``random``, overriding ``p``) or per class (``line`` / ``ring``: any rates, solved
            by Propositions 5 / 7).

    Returns:
        ``(result, info)``; ``info`` holds ``structure``, ``K``, ``d``, ``mu``, ``rho``,
        ``lam_total``, ``lam`` (the rate of each entry of ``L``), ``per`` (``"type"``,
        ``"class"`` or ``"pool"``), ``labels`` (one per entry of ``L``), ``num_classes``,
        ``stability_margin``, ``method``.

    Raises:
        ValueError: a malformed spec (see :func:`parse_spec`), bad ``rho`` / ``lam``, or an
            unstable load (naming the bottleneck).
    """
    kind, params = parse_spec(spec)
    K = params["K"][0]
    d = params["d"]
    mu = params.get("mu", [1.0])[0]
    r, rates = _rho_from(kind, K, mu, rho, lam, len(d))
    info: dict = {"structure": kind, "K": K, "mu": mu, "rho": r, "lam_total": r * K * mu}
    solver = _solve_random if kind == "random" else _solve_local
    res, more = solver(spec, kind, params, r, rates)
    info.update(more)
    if is_concrete(res.L):
        info["lam"] = [float(x) for x in np.asarray(res.L) / np.asarray(res.T)]
    if is_concrete(res.stability_margin):
        info["stability_margin"] = float(res.stability_margin)
    return res, info


def _solve_random(spec: str, kind: str, params: dict, r: float, rates) -> tuple[BFResult, dict]:
    """Randomized assignment (eq. (17), Section 4.2): metrics per type."""
    K, d, mu = params["K"][0], params["d"], params.get("mu", [1.0])[0]
    if rates is not None:
        if rates.size != len(d):
            raise ValueError(
                f"lam for {spec!r} must be a total rate or one rate per type ({len(d)}), "
                f"got {rates.size} values"
            )
        p = rates / rates.sum() if rates.sum() > 0 else np.full(len(d), 1.0 / len(d))
    else:
        p = np.asarray(params.get("p", [1.0 / len(d)] * len(d)), dtype=float)
    pool = RandomAssignment(K, tuple(d), p=jnp.asarray(p), mu=mu)
    res = pool.solve(r, with_servers=K <= 100000)
    return res, dict(
        d=d if len(d) > 1 else d[0],
        p=[float(x) for x in p],
        per="type",
        labels=[f"d={x}" for x in d],
        num_classes=int(sum(_comb_float(K, x) for x in d)),
        method="bf-recursive eq. (17) / Section 4.2, O(N K)",
    )


def _solve_local(spec: str, kind: str, params: dict, r: float, rates) -> tuple[BFResult, dict]:
    """Homogeneous line (Proposition 6, per class by Proposition 5 up to
    :data:`PER_CLASS_LINE_MAX_K`) or ring (eq. (28)); any rates per class by Propositions 5/7."""
    K, dd, mu = params["K"][0], params["d"][0], params.get("mu", [1.0])[0]
    H = HomogeneousRing(K, dd, mu) if kind == "ring" else HomogeneousLine(K, dd, mu)
    n = H.num_classes
    if rates is not None:
        if rates.size != n:
            raise ValueError(
                f"lam for {spec!r} must be a total rate or one rate per class ({n}), "
                f"got {rates.size} values"
            )
        res = H.interval_pool().solve(lam=jnp.asarray(rates))
        per, method = "class", "Proposition 7 (ring)" if kind == "ring" else "Proposition 5"
    elif kind == "ring":
        res = _spread(H.solve(r), n)
        per, method = "class", "eq. (28), O(K^2); classes equivalent"
    elif K <= PER_CLASS_LINE_MAX_K:
        res = H.solve_per_class(r)
        per, method = "class", "Proposition 5 with eq. (6), O(K^3)"
    else:
        res = H.solve(r)
        per, method = "pool", "Proposition 6, O(K^2) (whole pool)"
    starts = range(n)
    labels = [f"servers {s}..{(s + dd - 1) % K}" for s in starts] if per == "class" else ["all"]
    return res, dict(d=dd, per=per, labels=labels, num_classes=n, method=method)


def _comb_float(n: int, k: int) -> float:
    return float(math.comb(n, k))


def _spread(base: BFResult, n: int) -> BFResult:
    """Per-class result of a pool whose ``n`` classes are equivalent (ring)."""
    T = jnp.full((n,), base.T_mean)
    L = jnp.full((n,), base.L_total / n)
    return eqx.tree_at(lambda r: (r.L, r.T, r.gamma), base, (L, T, 1.0 / T))


def random_assignment_bf_curve(S: int, d: int, rhos, *, mu: float = 1.0):
    """Exact balanced-fairness curves of ``bf-clusters`` Figures 3-4 (random ``d`` among ``S``).

    Each job is assigned ``d`` of the ``S`` servers (capacity ``mu``) uniformly at random; all
    ``C(S, d)`` classes are equivalent, so their mean delay is the pool's ``T_mean`` (eq. (17) of
    ``bf-recursive``, job sizes of mean 1) and the mean service rate is ``1 / T_mean``
    (``bf-clusters`` eq. (9)).

    Args:
        S: number of servers. d: degree. rhos: loads (any shape); points with ``rho >= 1`` give
            ``delay = inf`` and ``service_rate = 0``.
        mu: server capacity.

    Returns:
        ``(delay, service_rate)`` arrays shaped like ``rhos``.

    Raises:
        ValueError: ``d`` outside ``[1, S]`` or negative loads.
    """
    pool = RandomAssignment(S, d, mu=mu)
    r = jnp.asarray(rhos, pool.p.dtype)
    if is_concrete(r) and np.any(np.asarray(r) < 0):
        raise ValueError("rhos must be >= 0")
    res, _ = pool.sweep(r.reshape(-1))
    delay = res.T_mean.reshape(r.shape)
    return delay, jnp.where(jnp.isfinite(delay), 1.0 / delay, 0.0)
