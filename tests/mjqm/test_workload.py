"""Workload model, counter-based inputs, stability guard and scenarios."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue import scenarios
from jaxqueue.dist import Deterministic, Erlang, Exponential, bimodal_phases, get_law
from jaxqueue.mjqm import (
    UnstableLoadError,
    Workload,
    lambda_c_closed_form,
    simulate,
    stability_limit,
)
from jaxqueue.mjqm._inputs import draw_jobs  # the inputs' internals, tested
from jaxqueue.mjqm.engines.recurrence._step import mjsre_merge
from jaxqueue.stats import mean_ci
from tests.helpers import assert_close, assert_within_ci

EXP = [Exponential(1.0), Exponential(2.0)]


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(servers=4, cores=[1, 5], probs=[0.5, 0.5], services=EXP), "cores"),
        (dict(servers=4, cores=[1, 2], probs=[0.5, 0.6], services=EXP), "probs"),
        (dict(servers=4, cores=[1, 2], probs=[1.0], services=EXP), "probs"),
        (dict(servers=4, cores=[0, 2], probs=[0.5, 0.5], services=EXP), "cores"),
        (dict(servers=4, cores=[1.5, 2], probs=[0.5, 0.5], services=EXP), "cores"),
        (dict(servers=0, cores=[1, 2], probs=[0.5, 0.5], services=EXP), "servers"),
        (dict(servers=4, cores=[1, 2], probs=[0.5, 0.5], services=EXP[:1] * 3), "services"),
        (dict(servers=4, cores=[1, 2], probs=[0.5, 0.5], services=[1.0, 2.0]), "services"),
        (
            dict(servers=4, cores=[1, 2], probs=[0.5, 0.5], services=[bimodal_phases()] * 2),
            "fixed-uniform",
        ),
        (dict(servers=[4, 2], cores=[[1, 3], [1, 1]], probs=[0.5, 0.5], services=EXP), "cores"),
    ],
)
def test_workload_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Workload(**kwargs)


def test_bad_laws_and_specific():
    with pytest.raises(ValueError, match="mean"):
        Exponential(-1.0)
    with pytest.raises(ValueError, match="unknown law"):
        get_law("weibull")
    with pytest.raises(ValueError, match="specific"):
        Workload(4, [1, 2], [0.5, 0.5], EXP, specific=[1, 3])
    with pytest.raises(ValueError, match="arrival"):
        Workload(4, [1, 2], [0.5, 0.5], EXP, arrival=bimodal_phases())


def test_moments_and_lambda_ideal():
    w = scenarios.get("five-class-exp")
    # papers/mjsre.md Section 8.2: lambda_ideal = 2.11
    assert round(float(w.lambda_ideal()), 2) == 2.11
    assert_close(w.mean_work(), [20 / float(w.lambda_ideal())])
    assert_close(
        w.idle_servers_expected(1.0), 20 - np.sum(w.probs * w.mean_service() * w.cores_array[:, 0])
    )
    mr = Workload([4, 2], [[1, 0], [2, 2]], [0.5, 0.5], EXP)
    # type 1: E[alpha sigma] = 0.5 + 2 = 2.5; type 2: 2 -> min(4 / 2.5, 2 / 2)
    assert_close(mr.lambda_ideal(), 1.0)


def test_table2_variances():
    """papers/mjsre.md Table 2 prints the variances of the hyperexponential and bounded
    Pareto laws (4 significant digits)."""
    hyp = [12.38, 34.10, 77.35, 548.96, 4950.51]
    bp = [5.62, 11.38, 20.078, 77.15, 335.56]
    for name, table in (("five-class-hyperexp", hyp), ("five-class-bpareto", bp)):
        var = np.array([float(law.var()) for law in scenarios.get(name).services])
        assert_close(var, table, rtol=2e-3, what=name)
    e3 = scenarios.get("five-class-erlang3")
    assert_close([float(law.scv()) for law in e3.services], [1 / 3] * 5)


# ------------------------------------------------------------------ inputs
def test_inputs_are_counter_based():
    w = scenarios.get("five-class-hyperexp")
    key = jax.random.key(3)
    jobs = jnp.arange(-50, 250)
    draw = jax.jit(draw_jobs)
    a = draw(w, 1.0, key, 7, jobs)
    b = draw(w, 1.0, key, 7, jobs[::-1].reshape(20, 15))  # any order and shape
    # a traced first job, as the forward scan draws its blocks
    c = jax.jit(lambda s: draw(w, 1.0, key, 7, s + jnp.arange(300, dtype=jnp.int32)))(-50)
    for x, y, z in zip(a[:4], b[:4], c[:4], strict=True):
        np.testing.assert_array_equal(x, np.asarray(y).reshape(-1, *x.shape[1:])[::-1])
        np.testing.assert_array_equal(x, z)
    other = draw(w, 1.0, key, 8, jobs)
    assert not np.array_equal(a.sigma, other.sigma)
    assert a.sigma.dtype == jnp.float32
    # tau scales as 1 / lam, everything else unchanged
    d = draw(w, 2.0, key, 7, jobs)
    assert_close(d.tau * 2, a.tau, rtol=1e-6)
    np.testing.assert_array_equal(d.cls, a.cls)


def test_input_laws():
    w = Workload(
        10,
        [1, 3, 10],
        [0.2, 0.5, 0.3],
        [Exponential(1.0), Erlang(3, 2.0), Deterministic(0.5)],
        arrival=Erlang(4, 1.0),
    )
    n = 200_000
    inp = jax.jit(draw_jobs, static_argnames="dtype")(
        w, 2.0, jax.random.key(0), 0, jnp.arange(n), dtype=jnp.float64
    )
    cls = np.asarray(inp.cls)
    freq = np.bincount(cls, minlength=3) / n
    sd = np.sqrt(np.array([0.2, 0.5, 0.3]) * (1 - np.array([0.2, 0.5, 0.3])) / n)
    assert np.all(np.abs(freq - [0.2, 0.5, 0.3]) < 4 * sd)
    np.testing.assert_array_equal(np.asarray(inp.alpha)[:, 0], np.array([1, 3, 10])[cls])
    for c, m in enumerate([1.0, 2.0, 0.5]):
        x = np.asarray(inp.sigma)[cls == c].reshape(-1, 1)
        est = mean_ci(x[: len(x) // 100 * 100].reshape(100, -1).mean(axis=1), level=0.999)
        assert_within_ci(est.mean, est.low, est.high, m, what=f"class {c} mean")
    tau = np.asarray(inp.tau)
    est = mean_ci(tau.reshape(100, -1).mean(axis=1), level=0.999)
    assert_within_ci(est.mean, est.low, est.high, 0.5, what="tau mean")
    assert abs(tau.var() / tau.mean() ** 2 - 0.25) < 0.01  # Erlang-4 renewal arrivals


# ------------------------------------------------------------------ stability guard
def _pile_growth(w, n, n_piles, key):
    """Growth rate of the pile, eq. (7), estimated from independent piles (Algorithm 2)."""

    def one(rep):
        inp = draw_jobs(w, 1.0, key, rep, jnp.arange(n), dtype=jnp.float64)

        def body(H, x):
            return mjsre_merge(H, x[0], x[1]), None

        H, _ = jax.lax.scan(body, jnp.zeros(w.s), (inp.alpha[:, 0], inp.sigma))
        return H[-1] / n

    return np.asarray(jax.jit(jax.vmap(one))(jnp.arange(n_piles)))


@pytest.mark.slow
@pytest.mark.parametrize("small", [Exponential(1.0), Deterministic(1.0)])
def test_eq8_closed_form_matches_pile_growth(small):
    """(Slow. The default suite: tests/mjqm/test_stability.py::
    test_eq8_two_implementations_and_pile, the closed form against eq. (8) summed term by term
    to 1e-10 and the QBD to 1e-9, and pile_growth's interval covering it, for exponential and
    deterministic one-core jobs.)"""
    w = Workload(6, [1, 6], [0.9, 0.1], [small, Exponential(2.0)])
    lam_c = lambda_c_closed_form(w)
    g = _pile_growth(w, 20_000, 32, jax.random.key(1))
    est = mean_ci(g, level=0.99)
    # the pile estimate is biased by O(1 / n) (one cycle over 20 000 jobs): well inside the CI
    assert_within_ci(est.mean, est.low, est.high, 1 / lam_c, what="gamma")
    assert lam_c < float(w.lambda_ideal())


def test_known_limits_and_the_cheap_load_checks():
    assert lambda_c_closed_form(scenarios.get("five-class-exp")) is None
    only_big = Workload(4, [4], [1.0], [Exponential(2.0)])
    assert_close(lambda_c_closed_form(only_big), 0.5)
    two = scenarios.get("two-class-256")
    lim = stability_limit(two)  # eq. (8): no key, no estimate
    assert lim.method == "closed-form" and lim.lambda_c < float(two.lambda_ideal())
    # refused before tracing: lambda_ideal, eq. (8), a lam that is no positive number
    key = jax.random.key(0)
    w = scenarios.get("five-class-exp")
    with pytest.raises(UnstableLoadError, match=r"lambda_ideal = 2\.10"):
        simulate(w, 2.2, key=key)
    for bad in (0.0, -1.0, float("nan"), float("inf"), "x"):
        with pytest.raises(ValueError, match="lam"):
            simulate(w, bad, key=key, override=True)
    with pytest.raises(UnstableLoadError, match=r"stability limit lambda_c = 20\.448"):
        simulate(two, 21.0, key=key)


# ------------------------------------------------------------------ scenarios
def test_scenarios():
    for name in ("five-class-exp", "five-class-erlang3", "five-class-hyperexp"):
        w = scenarios.get(name)
        assert w.servers == (20,) and w.cores == ((1,), (2,), (5,), (10,), (15,))
        assert_close(w.mean_service(), [0.5, 0.83, 1.25, 3.33, 10.0], rtol=1e-4)  # ERRATA 4
    borg = scenarios.get("borg-cell-b")
    assert borg.servers == (2048,) and borg.n_classes == 26
    assert_close(np.sum(borg.probs), 1.0)
    assert scenarios.get("two-class-200", big_mean=5.0).services[1].mean() == 5.0
    assert "Table 2" in scenarios.describe("five-class-bpareto")
    with pytest.raises(ValueError, match="unknown scenario"):
        scenarios.get("six-class")
    with pytest.raises(ValueError, match="parameters"):
        scenarios.get("five-class-exp", big_mean=2.0)
    assert {"m-model-sym", "two-class-256"} <= set(scenarios.names())
