"""Case studies of the dimensioning layer (``jaxqueue optimize --case NAME``).

Each case runs :func:`~jaxqueue.optimize.minimize` on a :class:`~jaxqueue.optimize.Problem`
(the MJQM cases: a Newton search) and returns a JSON-able dict with at least ``case``, ``cost``,
``targets_met``, ``slack``, ``params``, ``targets``, ``history`` (a short summary) and
``device``; ``fast=True`` uses reduced sizes (for ``jaxqueue demo`` and the tests). Cases:

* ``capacity-m-model``: least ``sum_k c_k mu_k`` with ``T_i <= target_i`` on the M model
  (``bf-clusters`` §5, closed forms (10)-(11)), re-evaluated by :func:`jaxqueue.pools.solve`;
* ``capacity-random-10``: the same on a random 10-server graph (:class:`SubsetBF`);
* ``typed-capacity``: servers per type of a :class:`TypedPool` minimising ``sum_t c_t n_t``,
  continuous through the aggregated pool, then rounded and re-checked exactly;
* ``traffic-split``: two job types over two candidate server groups each, split probabilities
  minimising the mean delay;
* ``degree-mix``: premium / regular jobs on K = 100 servers under randomized assignment
  (``bf-recursive`` §4.2, §6.1): least mean degree meeting a ratio of service rates, integer
  degrees by relaxation, rounding and exact re-verification;
* ``mjqm-max-rate``: the five-class MJQM (``mjsre`` Table 2): the largest arrival rate keeping
  every class's mean wait under a target (Newton on :func:`jaxqueue.mjqm.sensitivity`);
  ``mjqm-max-rate-exact`` the same on the exact waits (Newton on the exact ``dW/dlam``);
* ``mjqm-speedup``: the same queue at a fixed arrival rate: the smallest server speed-up
  keeping every class's 90th percentile of the wait under a target (as ``mjqm-max-rate``);
* ``mjqm-p99-server-filling``: five-class-bpareto under server-filling, the largest rate
  keeping the p99 wait under a target (Newton on :func:`jaxqueue.mjqm.sensitivity`).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..pools import Pool, TypedPool, solve, stability
from ..pools.structured import random_assignment_kernel, random_load_ratios
from . import _mjqm_cases, _mjqm_quantile
from ._bf import SubsetBF, m_model_metrics, random_degree_metrics
from ._minimize import minimize
from ._problem import Positive, Problem, Simplex, Target
from ._report import summarize as _summary

__all__ = ["CASES", "run_case", "build_case"]


def _pools_metrics(server_sets, mu, lam) -> dict:
    """Exact re-evaluation by the generic engine :func:`jaxqueue.pools.solve` (LP check)."""
    pool = Pool(server_sets, np.asarray(mu, dtype=float))
    lam = np.asarray(lam, dtype=float)
    st = stability(pool, lam)
    margin = float(1.0 - st.load)
    if margin <= 0:
        n = len(lam)
        return {"T": np.full(n, np.inf), "L": np.full(n, np.inf), "margin": margin}
    res = solve(pool, lam)
    return {
        "T": np.asarray(res.T),
        "L": np.asarray(res.L),
        "T_mean": float(res.T_mean),
        "psi": float(res.psi),
        "margin": margin,
    }


# ----------------------------------------------------------------------------- capacity
def _capacity_case(name, server_sets, lam, weights, targets_T, mu0, metrics_fn, opts):
    lam = np.asarray(lam, float)
    w = jnp.asarray(weights, float)
    targets = [Target("T", float(t), index=i) for i, t in enumerate(targets_T)]
    problem = Problem(
        params0={"mu": jnp.asarray(mu0, float)},
        transforms={"mu": Positive()},
        cost=lambda p: jnp.sum(w * p["mu"]),
        metrics=lambda p: metrics_fn(p["mu"], jnp.asarray(lam)),
        targets=targets,
        evaluate=lambda p: _pools_metrics(server_sets, p["mu"], lam),
        polish=lambda p, s: {"mu": p["mu"] * s},
    )
    res = minimize(problem, **opts)
    return res, _summary(
        res,
        {
            "case": name,
            "server_sets": [list(s) for s in server_sets],
            "lam": lam.tolist(),
            "cost_weights": np.asarray(weights, float).tolist(),
            "targets": {"T": [float(t) for t in targets_T]},
            "params": {"mu": res.params["mu"].tolist()},
            "metrics": {"T": res.metrics["T"].tolist(), "margin": res.metrics["margin"]},
        },
    )


M_MODEL = {
    "server_sets": [[0, 2], [1, 2]],
    "lam": [1.2, 0.6],
    "cost_weights": [1.0, 1.0, 1.5],
    "targets_T": [1.2, 1.5],
}


def capacity_m_model(fast: bool = False, progress=None):
    """Least-cost capacities of the M model (closed forms (10)-(11) of ``bf-clusters``)."""
    c = M_MODEL
    opts = {"steps": 200 if fast else 400, "rounds": 6, "progress": progress}
    return _capacity_case(
        "capacity-m-model",
        c["server_sets"],
        c["lam"],
        c["cost_weights"],
        c["targets_T"],
        [2.0, 2.0, 2.0],
        m_model_metrics,
        opts,
    )


def random_graph(K: int, n_classes: int, seed: int = 7):
    """A random class-server graph (each class on 2-4 servers, every server used), rates,
    cost weights and per-class targets ``T_i`` (between 0.7 and 1.3 times the response times
    at unit capacities, so some targets bind and others do not)."""
    rng = np.random.default_rng(seed)
    while True:
        sets = [
            sorted(rng.choice(K, size=int(rng.integers(2, 5)), replace=False).tolist())
            for _ in range(n_classes)
        ]
        if len({k for s in sets for k in s}) == K:
            break
    lam = rng.uniform(0.2, 0.6, n_classes)
    weights = rng.uniform(1.0, 2.0, K)
    ref = SubsetBF(sets, K).metrics(jnp.ones(K), jnp.asarray(lam))
    if not float(ref["margin"]) > 0:
        raise ValueError("random_graph: unit capacities are unstable for this seed")
    targets = np.asarray(ref["T"]) * rng.uniform(0.7, 1.3, n_classes)
    return sets, lam, weights, targets


def capacity_random_10(fast: bool = False, progress=None):
    """Least-cost capacities on a random 10-server graph (6 servers with ``fast``)."""
    K, n = (6, 5) if fast else (10, 8)
    sets, lam, weights, targets = random_graph(K, n)
    engine = SubsetBF(sets, K)
    opts = {"steps": 150 if fast else 300, "rounds": 6, "progress": progress}
    return _capacity_case(
        "capacity-random-10",
        sets,
        lam,
        weights,
        targets,
        2.0 * np.ones(K),
        engine.metrics,
        opts,
    )


# ----------------------------------------------------------------------------- typed capacity
TYPED_CAPACITY = {
    # four server types (older / newer CPUs, two GPU models); a class may use a set of types
    "type_sets": [[0, 1], [1], [2, 3], [3], [0, 1, 2, 3]],
    "mu": [1.0, 1.5, 2.0, 3.0],  # capacity of one server of each type
    "cost_weights": [1.0, 1.4, 3.0, 4.0],  # cost of one server of each type
    "lam": [40.0, 15.0, 30.0, 10.0, 20.0],
    "targets_T": [0.04, 0.06, 0.05, 0.08, 0.025],
    "counts0": [60.0, 40.0, 30.0, 15.0],
}


def typed_capacity_exact(c: dict, counts) -> dict:
    """Exact re-evaluation of server counts by :func:`jaxqueue.pools.solve`: on the
    :class:`~jaxqueue.pools.TypedPool` for integer counts, on the aggregated pool (one server
    per type of capacity ``n_t mu_t``, the same metrics) for relaxed ones."""
    n = np.asarray(counts, float)
    mu = np.asarray(c["mu"], float)
    lam = np.asarray(c["lam"], float)
    integral = bool(np.all(n == np.round(n)) and np.all(n >= 1))
    pool = (
        TypedPool(n.astype(int), c["type_sets"], mu) if integral else Pool(c["type_sets"], n * mu)
    )
    margin = float(1.0 - stability(pool, lam).load)
    if margin <= 0:
        return {"T": np.full(lam.size, np.inf), "margin": margin, "integral": integral}
    res = solve(pool, lam)
    return {
        "T": np.asarray(res.T),
        "T_mean": float(res.T_mean),
        "margin": margin,
        "integral": integral,
    }


def _typed_candidates(params):
    """Integer counts around the relaxed ones: per type its ceiling, one more, or its floor
    (at least 1); each is re-checked exactly and the cheapest feasible one is kept."""
    n = np.asarray(params["n"], float)
    opts = [sorted({max(1, int(np.floor(x))), int(np.ceil(x)), int(np.ceil(x)) + 1}) for x in n]
    grids = np.stack(np.meshgrid(*opts, indexing="ij"), -1).reshape(-1, n.size)
    return [{"n": jnp.asarray(g, float)} for g in grids]


def typed_capacity(fast: bool = False, progress=None):
    """How many servers of each type minimise ``sum_t c_t n_t`` under ``T_i <= target_i``.

    Balanced fairness on a typed pool is that of its aggregated pool (one server per type of
    capacity ``n_t mu_t``), so the relaxation treats ``n_t`` as continuous through
    :class:`SubsetBF` on the ``2^T`` type subsets; the counts are then rounded (ceiling, one
    more, floor) and each rounding re-checked exactly on the :class:`~jaxqueue.pools.TypedPool`.
    """
    c = TYPED_CAPACITY
    engine = SubsetBF(c["type_sets"], len(c["mu"]))
    mu = jnp.asarray(c["mu"], float)
    lam = jnp.asarray(c["lam"], float)
    w = jnp.asarray(c["cost_weights"], float)
    problem = Problem(
        params0={"n": jnp.asarray(c["counts0"], float)},
        transforms={"n": Positive()},
        cost=lambda p: jnp.sum(w * p["n"]),
        metrics=lambda p: engine.metrics(p["n"] * mu, lam),
        targets=[Target("T", float(t), index=i) for i, t in enumerate(c["targets_T"])],
        evaluate=lambda p: typed_capacity_exact(c, p["n"]),
        candidates=_typed_candidates,
    )
    res = minimize(problem, steps=150 if fast else 300, rounds=6, progress=progress)
    counts = [int(round(x)) for x in np.asarray(res.params["n"])]
    return res, _summary(
        res,
        {
            "case": "typed-capacity",
            "type_sets": c["type_sets"],
            "mu": c["mu"],
            "lam": c["lam"],
            "cost_weights": c["cost_weights"],
            "targets": {"T": c["targets_T"]},
            "params": {"counts": counts},
            "relaxed_counts": np.asarray(res.relaxed_params["n"]).tolist(),
            "num_servers": int(sum(counts)),
            "metrics": {
                "T": np.asarray(res.metrics["T"]).tolist(),
                "margin": float(res.metrics["margin"]),
                "integral": bool(res.metrics["integral"]),
            },
        },
    )


# ----------------------------------------------------------------------------- traffic split
TRAFFIC_SPLIT = {
    # servers 0..3; type A may use group {0,1} or {1,2}; type B group {2,3} or {1,2,3}
    "mu": [1.0, 1.5, 1.0, 0.8],
    "groups": [[[0, 1], [1, 2]], [[2, 3], [1, 2, 3]]],
    "rates": [1.4, 1.1],
}


def traffic_split_metrics(c: dict) -> Callable:
    """``split (types, groups) -> metrics`` of the pool whose classes are (type, group)."""
    sets = [g for groups in c["groups"] for g in groups]
    engine = SubsetBF(sets, len(c["mu"]))
    mu = jnp.asarray(c["mu"], float)
    rates = jnp.asarray(c["rates"], float)

    def fn(split):
        lam = (rates[:, None] * split).reshape(-1)
        return engine.metrics(mu, lam)

    return fn


def traffic_split(fast: bool = False, progress=None):
    """Split of two job types over candidate server groups minimising the mean delay."""
    c = TRAFFIC_SPLIT
    fn = traffic_split_metrics(c)
    n_types, n_groups = len(c["groups"]), len(c["groups"][0])
    problem = Problem(
        params0={"split": jnp.full((n_types, n_groups), 1.0 / n_groups)},
        transforms={"split": Simplex()},
        cost=lambda p: fn(p["split"])["T_mean"],
        metrics=lambda p: fn(p["split"]),
    )
    res = minimize(
        problem, steps=150 if fast else 300, rounds=1, learning_rate=0.1, progress=progress
    )
    return res, _summary(
        res,
        {
            "case": "traffic-split",
            "server_sets": c["groups"],
            "mu": c["mu"],
            "rates": c["rates"],
            "targets": {},
            "params": {"split": res.params["split"].tolist()},
            "metrics": {"T_mean": float(res.metrics["T_mean"]), "T": res.metrics["T"].tolist()},
        },
    )


# ----------------------------------------------------------------------------- degree mix
DEGREE_MIX = {
    "K": 100,
    "rho": 0.9,
    "type_probs": [0.3, 0.7],  # premium, regular
    "max_degree": 30,
    "ratio": 1.5,  # gamma_premium / gamma_regular >=
    "gamma_regular": 2.0,  # gamma_regular >=
}


def degree_mix_metrics(c: dict) -> Callable:
    """``degree_probs (2, D) -> metrics`` incl. ``ratio = gamma_premium / gamma_regular``."""

    def fn(w):
        m = random_degree_metrics(
            jnp.asarray(c["rho"], float), jnp.asarray(c["type_probs"], float), w, n_servers=c["K"]
        )
        m["ratio"] = m["gamma"][0] / m["gamma"][1]
        return m

    return fn


def degree_mix_exact(c: dict, w) -> dict:
    """Re-evaluation by the structured engine :mod:`jaxqueue.pools.structured` (§4.2): each
    (type, degree) pair with positive weight is a job type of its own; per-type ``L`` sums over
    degrees."""
    w = np.asarray(w, float)
    p = np.asarray(c["type_probs"], float)
    K = int(c["K"])
    u_idx, d_idx = np.nonzero(w > 0)
    share = p[u_idx] * w[u_idx, d_idx]
    ratios = random_load_ratios(jnp.asarray(d_idx + 1), K=K)
    res, stable = random_assignment_kernel(jnp.asarray(c["rho"], float), ratios, jnp.asarray(share))
    L = np.zeros(len(p))
    np.add.at(L, u_idx, np.asarray(res.L))
    T = L / (K * float(c["rho"]) * p)
    gamma = 1.0 / T
    return {
        "gamma": gamma,
        "T": T,
        "ratio": gamma[0] / gamma[1],
        "mean_degree_all": float(np.sum(share * (d_idx + 1))),
        "margin": 1.0 - float(c["rho"]) if bool(stable) else -1.0,
    }


def _one_hot_degrees(degrees, D):
    w = np.zeros((len(degrees), D))
    for u, d in enumerate(degrees):
        w[u, int(d) - 1] = 1.0
    return jnp.asarray(w)


def degree_mix(fast: bool = False, progress=None):
    """Least mean degree for premium / regular jobs meeting a service-rate ratio and floor."""
    c = dict(DEGREE_MIX)
    if fast:
        c.update(K=40, max_degree=16, gamma_regular=1.5)
    fn = degree_mix_metrics(c)
    D = c["max_degree"]
    d = np.arange(1, D + 1)
    logits0 = -0.5 * ((d[None, :] - np.array([[D / 2], [D / 4]])) / 2.0) ** 2
    p = np.asarray(c["type_probs"])

    def candidates(params):
        means = np.asarray(params["w"]) @ d
        rng = [range(max(1, int(np.floor(m)) - 3), min(D, int(np.ceil(m)) + 3) + 1) for m in means]
        return [{"w": _one_hot_degrees((a, b), D)} for a in rng[0] for b in rng[1]]

    problem = Problem(
        params0={"w": jax.nn.softmax(jnp.asarray(logits0), axis=-1)},
        transforms={"w": Simplex()},
        cost=lambda q: jnp.sum(jnp.asarray(p) * (q["w"] @ jnp.asarray(d, float))),
        metrics=lambda q: fn(q["w"]),
        targets=[
            Target("ratio", c["ratio"], sense="lower"),
            Target("gamma", c["gamma_regular"], index=1, sense="lower"),
        ],
        evaluate=lambda q: degree_mix_exact(c, q["w"]),
        candidates=candidates,
    )
    res = minimize(
        problem, steps=150 if fast else 300, rounds=6, learning_rate=0.1, progress=progress
    )
    degrees = [int(np.argmax(row)) + 1 for row in res.params["w"]]
    return res, _summary(
        res,
        {
            "case": "degree-mix",
            "K": c["K"],
            "rho": c["rho"],
            "type_probs": c["type_probs"],
            "targets": {"ratio": c["ratio"], "gamma_regular": c["gamma_regular"]},
            "params": {"degrees": degrees},
            "relaxed_mean_degrees": (res.relaxed_params["w"] @ d).tolist(),
            "metrics": {
                "gamma": res.metrics["gamma"].tolist(),
                "ratio": float(res.metrics["ratio"]),
                "mean_degree": float(res.metrics["mean_degree_all"]),
            },
        },
    )


def _mjqm_case(name, module=_mjqm_cases):
    def run(fast: bool = False, progress=None, seed: int = 0):
        return getattr(module, name.replace("-", "_"))(fast=fast, progress=progress, seed=seed)

    return run


CASES: dict[str, Callable] = {
    "capacity-m-model": capacity_m_model,
    "capacity-random-10": capacity_random_10,
    "typed-capacity": typed_capacity,
    "traffic-split": traffic_split,
    "degree-mix": degree_mix,
    "mjqm-max-rate": _mjqm_case("mjqm-max-rate"),
    "mjqm-speedup": _mjqm_case("mjqm-speedup"),
    "mjqm-max-rate-exact": _mjqm_case("mjqm-max-rate-exact"),
    "mjqm-p99-server-filling": _mjqm_case("mjqm-p99-server-filling", _mjqm_quantile),
}


def build_case(name: str, fast: bool = False, progress=None, seed: int | None = None):
    """Run case ``name`` and return ``(OptimizeResult, summary dict)``. ``seed`` (default 0)
    is the PRNG seed of the cases that simulate; the others are deterministic.

    Raises:
        ValueError: unknown case name.
    """
    if name not in CASES:
        raise ValueError(f"case: unknown {name!r}; choose one of {sorted(CASES)}")
    kwargs = {"fast": fast, "progress": progress}
    if seed is not None and "seed" in inspect.signature(CASES[name]).parameters:
        kwargs["seed"] = seed
    return CASES[name](**kwargs)


def run_case(name: str, fast: bool | None = None, progress=None, seed: int | None = None) -> dict:
    """Run a case study and return the JSON-able dict printed by ``jaxqueue optimize``.

    Args:
        name: one of :data:`CASES`.
        fast: reduced sizes (default: the ``JAXQUEUE_FAST`` environment variable).
        progress: optional ``progress(round, info)`` callback.
        seed: PRNG seed of the cases that simulate (``mjqm-max-rate``, ``mjqm-speedup``).

    Returns:
        dict with ``case``, ``cost``, ``targets_met``, ``slack``, ``params``, ... .

    Examples:
        >>> out = run_case("capacity-m-model", fast=True)  # doctest: +SKIP
    """
    if fast is None:
        fast = os.environ.get("JAXQUEUE_FAST", "") not in ("", "0")
    return build_case(name, fast=fast, progress=progress, seed=seed)[1]
