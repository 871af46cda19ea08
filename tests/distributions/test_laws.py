import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue import dist

LAWS = [
    dist.Exponential(2.0),
    dist.Erlang(3, 1.5),
    dist.HyperExponential(np.array([5.0, 0.2]), np.array([1 / 6, 5 / 6])),
    dist.BoundedPareto(0.1492, 400.0, 1.4),
    dist.Deterministic(0.7),
    dist.Empirical(np.array([1.0, 2.0, 4.0])),
    dist.bimodal_phases(),
    dist.zipf_phases(),
]


@pytest.mark.parametrize("law", LAWS, ids=lambda l: type(l).__name__)
def test_sample_moments_match_formulas(law):
    n = 200_000
    x = np.asarray(law.sample(jax.random.key(0), (n,)))
    m, s = float(law.mean()), float(law.std())
    # 5-sigma band for the sample mean (heavy tails: the variance is finite for all laws here)
    assert abs(x.mean() - m) <= 5 * s / np.sqrt(n) + 1e-12
    assert np.all(x > 0)


def test_paper_section5_moments():
    # bf-clusters Section 5 and ERRATA item 2
    assert np.isclose(dist.bimodal_phases().mean(), 1.0)
    assert np.isclose(dist.bimodal_phases().std(), 1.84, atol=0.01)
    hyper = dist.get_law("hyperexp")
    assert np.isclose(hyper.mean(), 1.0) and np.isclose(hyper.std(), np.sqrt(7.4))
    z = dist.zipf_phases()
    assert np.isclose(z.mean(), 3.58, atol=0.01) and np.isclose(z.std(), 10.61, atol=0.01)


def test_bounded_pareto_cv_table2():
    # mjsre.md Section 8: per-class coefficients of variation 4.74, ..., 1.83
    xmins = [0.1492, 0.250222, 0.380669, 1.04846, 3.34773]
    cvs = [4.74, 4.06, 3.58, 2.64, 1.83]
    for lo, cv in zip(xmins, cvs, strict=True):
        law = dist.BoundedPareto(lo, 400.0, 1.4)
        assert np.isclose(float(law.std() / law.mean()), cv, atol=0.01)


def test_scaled_and_reparameterised_gradient():
    key = jax.random.key(1)
    f = lambda m: dist.Erlang(3, m).sample(key, (1000,)).mean()
    # the sample is linear in the mean, so d/dm of the sample mean is sample_mean / m
    g = jax.grad(f)(2.0)
    assert np.isclose(g, f(2.0) / 2.0)
    assert np.isclose(dist.get_law("zipf").mean(), 1.0)


@pytest.mark.parametrize(
    "bad",
    [
        lambda: dist.Exponential(-1.0),
        lambda: dist.Erlang(0, 1.0),
        lambda: dist.HyperExponential(np.array([1.0, 2.0]), np.array([0.5, 0.6])),
        lambda: dist.BoundedPareto(2.0, 1.0, 1.4),
        lambda: dist.get_law("weibull"),
    ],
)
def test_bad_parameters_raise(bad):
    with pytest.raises(ValueError):
        bad()


def test_from_uniforms_matches_sample():
    law = dist.HyperExponential(jnp.array([5.0, 0.2]), jnp.array([0.25, 0.75]))
    u = jax.random.uniform(jax.random.key(3), (50_000, 2), minval=1e-300)
    x = law.from_uniforms(u)
    assert np.isclose(float(x.mean()), float(law.mean()), rtol=0.05)


def test_one_registry_of_law_names():
    """The workload files' families and the scheduler's named laws come from one registry."""
    assert dist.law_families() == (
        "exponential",
        "erlang",
        "hyperexponential",
        "bounded-pareto",
        "deterministic",
        "coxian",
    )
    assert dist.law_fields("erlang") == ("mean", "k")
    law = dist.law_from_fields("erlang", {"mean": 2.0, "k": 3}, "classes[0].")
    assert isinstance(law, dist.Erlang) and np.isclose(float(law.mean()), 2.0)
    with pytest.raises(ValueError, match=r"^classes\[0\]\.k: must be an integer"):
        dist.law_from_fields("erlang", {"mean": 2.0, "k": 1.5}, "classes[0].")
    # the aliases of the command line name members of the families
    assert isinstance(dist.get_law("exp"), dist.Exponential)
    assert isinstance(dist.get_law("exponential"), dist.Exponential)
    assert isinstance(dist.get_law("hyperexp"), dist.HyperExponential)
    for name in ("exp", "bimodal", "hyperexp", "zipf"):
        assert np.isclose(float(dist.get_law(name).mean()), 1.0)
