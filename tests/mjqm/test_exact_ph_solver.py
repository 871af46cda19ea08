"""``mjqm.exact`` with phase-type services (the level-dependent QBD over (class, phase) types).

References, none of them the code under test:

* the dense exponential QBD (one-phase laws: ``Erlang(1, m)``, and the phase-type path forced
  on exponential laws), to 1e-10;
* Pollaczek-Khinchine for M/E_k/1, M/H2/1 and M/Cox/1 (``tests/references/closed_forms.py``),
  to 1e-10;
* the brute-force truncated CTMC of the explicit queue with ordered waiting classes and
  explicit phases (``tests/references/mjqm_ph_ctmc.py``, its tabulated values, recomputed by
  the slow tests of ``test_reference_ph_ctmc.py``), to 1e-6;
* central finite differences for the gradients.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue import scenarios
from jaxqueue.dist import BoundedPareto, Coxian, Erlang, Exponential, HyperExponential
from jaxqueue.mjqm import Workload, exact, exact_lambda_c, exact_size
from jaxqueue.mjqm._exact._api import _ph_exact
from tests.references import closed_forms as cf
from tests.references import mjqm_ph_ctmc as ref


def _law(alpha, T):
    """A package law with the phase form ``(alpha, T)`` of the reference's constructors."""
    alpha, T = np.asarray(alpha, float), np.asarray(T, float)
    k = len(alpha)
    if k == 1:
        return Exponential(-1.0 / T[0, 0])
    if np.allclose(T, np.diag(np.diag(T))):  # hyperexponential
        return HyperExponential(-1.0 / np.diag(T), alpha)
    rates = -np.diag(T)
    if np.allclose(rates, rates[0]) and np.allclose(np.diag(T, 1), rates[0]):  # Erlang
        return Erlang(k, k / rates[0])
    return Coxian(rates, np.diag(T, 1) / rates[:-1])


def _workload(name: str) -> Workload:
    sysd = ref.REFERENCE_SYSTEMS[name]
    laws = [_law(a, T) for a, T in zip(sysd["alphas"], sysd["Ts"], strict=True)]
    return Workload(sysd["s"], sysd["cores"], sysd["probs"], laws)


def _compare(res, expected: dict, rtol: float) -> None:
    np.testing.assert_allclose(float(res.lambda_c), expected["lambda_c"], rtol=1e-9)
    np.testing.assert_allclose(
        np.asarray(res.wait_mean_class), expected["wait_mean_class"], rtol=rtol
    )
    np.testing.assert_allclose(float(res.wait_mean), expected["wait_mean"], rtol=rtol)
    np.testing.assert_allclose(float(res.p_wait), expected["p_wait"], rtol=rtol)
    np.testing.assert_allclose(float(res.jobs_mean), expected["jobs_mean"], rtol=rtol)


FIELDS = ("wait_mean", "wait_mean_class", "p_wait", "jobs_mean", "jobs_waiting_class")
FIELDS += ("jobs_service_class", "idle_servers", "hol_idle_servers", "lambda_c")


def test_one_phase_laws_equal_the_exponential_qbd():
    w = Workload(5, [1, 2, 4], [0.5, 0.3, 0.2], [Exponential(m) for m in (1.0, 2.0, 0.7)])
    lam = 0.6 * float(exact_lambda_c(w))
    expo = exact(w, lam)
    one = Workload(5, [1, 2, 4], [0.5, 0.3, 0.2], [Erlang(1, m) for m in (1.0, 2.0, 0.7)])
    for res in (exact(one, lam), _ph_exact(w, lam)):
        assert res.phases == expo.phases and res.levels == expo.levels
        for f in FIELDS:
            np.testing.assert_allclose(
                np.asarray(getattr(res, f)), np.asarray(getattr(expo, f)), rtol=1e-10, err_msg=f
            )


@pytest.mark.parametrize(
    "law",
    [
        Erlang(3, 1.0),
        HyperExponential(np.array([0.4, 3.0]), np.array([0.7, 0.3])),
        pytest.param(Erlang(5, 0.8), marks=pytest.mark.slow),
        pytest.param(
            Coxian(np.array([3.0, 1.5, 2.0]), np.array([0.6, 0.4])), marks=pytest.mark.slow
        ),
    ],
    ids=["e3", "h2", "e5", "cox3"],
)
def test_one_server_is_pollaczek_khinchine(law):
    a, T = (np.asarray(x, float) for x in law.phase_form())
    es, es2 = cf.ph_moment(a, T, 1), cf.ph_moment(a, T, 2)
    for rho in (0.3, 0.85):
        lam = rho / es
        res = exact(Workload(1, [1], [1.0], [law]), lam)
        assert abs(float(res.wait_mean) - cf.mg1_mean_wait(lam, es, es2)) <= 1e-10 * max(
            1.0, cf.mg1_mean_wait(lam, es, es2)
        )
        assert abs(float(res.p_wait) - cf.mg1_p_wait(lam, es)) <= 1e-10
        assert abs(float(res.lambda_c) - 1.0 / es) <= 1e-10 / es
        # Little: mean number in service is rho
        assert abs(float(res.jobs_service_class[0]) - rho) <= 1e-10


# two systems in the default suite (one compilation each), three more with the slow tests
@pytest.mark.parametrize(
    "name",
    ["s2-erlang2-exp", "s5-coxian3-erlang2"]
    + [
        pytest.param(n, marks=pytest.mark.slow)
        for n in ("s3-h2-erlang3", "s4-three-class", "s6-rare-big")
    ],
)
def test_equals_the_brute_force_ctmc_tables(name):
    """To 1e-6 relative (the tables' cut errors are estimated at 2e-9 to 1.2e-6)."""
    res = exact(_workload(name), ref.REFERENCE_SYSTEMS[name]["lam"])
    expected = ref.REFERENCE_VALUES[name]
    _compare(res, expected, 1e-6)
    np.testing.assert_allclose(
        np.asarray(res.response_mean_class), expected["response_mean_class"], rtol=1e-6
    )


def test_lambda_c_equals_the_sparse_saturated_chain():
    w = _workload("s5-coxian3-erlang2")
    res = exact(w, 0.5)
    np.testing.assert_allclose(float(res.lambda_c), float(exact_lambda_c(w)), rtol=1e-10)


def _grad_system(rate, x, cont):
    cox = Coxian(jnp.stack([rate, 1.5]), jnp.stack([cont]))
    return Workload(3, [1, 2], jnp.stack([1.0 - x, x]), [Erlang(2, 1.0), cox])


def test_mean_wait_gradients_match_central_differences_under_jit():
    """The gradient in ``lam``, a Coxian rate, the class mix and the Coxian's continuation
    probability, under ``jax.jit``: traced law parameters must keep every support of the
    phase form (a traced continuation probability read as one would drop the Coxian's first
    exit: a mean wait 9% low)."""

    def f(lam, rate, x, cont):
        return exact(_grad_system(rate, x, cont), lam).wait_mean

    x0 = (0.5, 2.0, 0.35, 0.5)
    value, grads = jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2, 3)))(*x0)
    np.testing.assert_allclose(float(value), float(f(*x0)), rtol=1e-12)
    h = 1e-5
    for i, g in enumerate(grads):
        up, dn = list(x0), list(x0)
        up[i] += h
        dn[i] -= h
        fd = (float(f(*up)) - float(f(*dn))) / (2 * h)
        assert abs(float(g) - fd) <= 1e-5 * abs(fd), (i, float(g), fd)


def test_refusals_are_one_line():
    bp = Workload(4, [1, 2], [0.5, 0.5], [Erlang(2, 1.0), BoundedPareto(0.5, 20.0, 1.5)])
    cases = [
        (bp, 0.1, ["class 1", "not phase-type", "mjqm simulate"]),
        (
            Workload(2, [1, 2], [0.5, 0.5], [Erlang(2, 1.0), Erlang(2, 1.0)], Erlang(2, 1.0)),
            0.1,
            ["not Poisson", "Erlang"],
        ),
        (
            scenarios.get("five-class-hyperexp"),
            0.5,
            [
                "25,263 phases",
                "494 GB and 1.2e+05 CPU-s (34 h)",
                "R is dense (25,263^2, 5.11 GB",
                "mjqm simulate",
            ],
        ),
        (scenarios.get("five-class-erlang3"), 0.5, ["324,780 phases", "GB and", "CPU-s"]),
        (_workload("s2-erlang2-exp"), 1.2, ["lambda_c = 1.12787", "stability limit"]),
        (_workload("s2-erlang2-exp"), -1.0, ["positive"]),
    ]
    for w, lam, needles in cases:
        with pytest.raises(ValueError) as err:
            exact(w, lam)
        msg = str(err.value)
        assert "\n" not in msg and msg.startswith("exact: "), msg
        for n in needles:
            assert n in msg, (n, msg)


def test_exact_size_is_the_size_the_refusal_names():
    """``exact_size`` of a phase-type workload is the phase-type QBD's (the figures of its
    refusal: phases, memory and time), not the exponential QBD's of the same phase counts
    (226.6 GB here). Its time is the exponential QBD's model at the largest level (25,263
    phases, 21 levels: 1.5e-10 (21 + 30) 25,263^3 CPU-s)."""
    wl = scenarios.get("five-class-hyperexp")
    size = exact_size(wl)
    with pytest.raises(ValueError) as err:
        exact(wl, 0.5)
    assert size["phases"] == 25_263 and size["levels"] == 21
    np.testing.assert_allclose(size["seconds"], 1.5e-10 * 51 * 25_263.0**3, rtol=1e-12)
    assert (
        f"{size['phases']:,} phases per level and needs about {size['bytes'] / 1e9:.3g} GB and "
        f"{size['seconds']:.2g} CPU-s ({size['seconds'] / 3600:.2g} h)"
    ) in str(err.value)
