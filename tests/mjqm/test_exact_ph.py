"""The exact stability limit with phase-type services (``mjqm.exact_lambda_c`` on the
saturated chain over the jobs in service per (class, phase)).

Checked against what does not share its code: the dense exponential QBD (one-phase laws, to
1e-10), closed forms (one server: ``1 / E[S]``; one-core jobs: ``s / E[S]``; eq. (8) for
one-or-all workloads, where the all-server class enters only by its mean), a hand-solved
two-server chain with Erlang-2 jobs, and central finite differences for the gradients.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue import scenarios
from jaxqueue.dist import BoundedPareto, Coxian, Erlang, Exponential, HyperExponential
from jaxqueue.mjqm import Workload, exact, exact_lambda_c, lambda_c_closed_form, stability_limit
from jaxqueue.mjqm._exact._api import _ph_lambda_c
from tests.references.mjqm_exact_values import FIVE_CLASS_EXP_LAMBDA_C

H2 = HyperExponential(np.array([0.5, 3.0]), np.array([0.8, 0.2]))


def test_one_phase_laws_equal_the_exponential_qbd():
    # the phase-type path forced on exponential laws against the dense QBD
    for wl in (
        scenarios.get("five-class-exp"),
        Workload(6, [1, 2, 3], [0.5, 0.3, 0.2], [Exponential(m) for m in (1.0, 2.0, 0.7)]),
    ):
        np.testing.assert_allclose(
            float(_ph_lambda_c(wl)), float(exact_lambda_c(wl)), rtol=1e-10, atol=0
        )
    # the limit the tabulated five-class-exp values are at fractions of
    five = float(exact_lambda_c(scenarios.get("five-class-exp")))
    np.testing.assert_allclose(five, FIVE_CLASS_EXP_LAMBDA_C, rtol=1e-10, atol=0)
    # a hyperexponential whose phases have one mean is exponential
    same = HyperExponential(np.array([1.5, 1.5]), np.array([0.3, 0.7]))
    w1 = Workload(5, [1, 3], [0.6, 0.4], [Exponential(1.0), same])
    w2 = Workload(5, [1, 3], [0.6, 0.4], [Exponential(1.0), Exponential(1.5)])
    np.testing.assert_allclose(float(exact_lambda_c(w1)), float(exact_lambda_c(w2)), rtol=1e-10)


@pytest.mark.parametrize("law", [Erlang(3, 1.7), H2, Erlang(2, 0.4)], ids=["e3", "h2", "e2"])
def test_closed_forms(law):
    mean = float(law.mean())
    # one server (M/PH/1): 1 / E[S]
    w = Workload(1, [1, 1], [0.4, 0.6], [law, Exponential(mean)])
    np.testing.assert_allclose(float(exact_lambda_c(w)), 1.0 / mean, rtol=1e-10)
    # one-core jobs: the s servers never idle in saturation
    w = Workload(3, [1, 1], [0.5, 0.5], [law, Erlang(2, 2.0)])
    np.testing.assert_allclose(float(exact_lambda_c(w)), 3.0 / (0.5 * mean + 1.0), rtol=1e-10)
    # eq. (8), one-or-all: the all-server class enters by its mean only
    w = Workload(4, [1, 4], [0.9, 0.1], [Exponential(1.0), law])
    ref = lambda_c_closed_form(
        Workload(4, [1, 4], [0.9, 0.1], [Exponential(1.0), Exponential(mean)])
    )
    np.testing.assert_allclose(float(exact_lambda_c(w)), ref, rtol=1e-10)


def test_two_servers_erlang2_by_hand():
    """s = 2, class 0 (1 core, Erlang-2 of rate r per phase) w.p. p, class 1 (2 cores,
    exponential of rate mu). The saturated chain written from the model with the class of the
    next job revealed only when it could enter (a lumping the package does not use): six
    states, solved densely."""
    p, r, mu = 0.7, 3.0, 0.8
    # states: 0 (1,1): two small in phase 1; 1 (1,2); 2 (2,2); 3 small ph1 + big head;
    # 4 small ph2 + big head; 5 big in service (head revealed at its end)
    Q = np.zeros((6, 6))
    # two small jobs in phases: a phase-1 -> 2 step, a phase-2 completion refills from the
    # queue: small (ph1) w.p. p, else the big one waits behind the remaining small job
    Q[0, 1] = 2 * r
    Q[1, 2] = r
    Q[1, 0] = r * p  # the phase-2 job leaves, a small enters in phase 1
    Q[1, 3] = r * (1 - p)  # a big head waits behind the phase-1 job
    Q[2, 1] = 2 * r * p
    Q[2, 4] = 2 * r * (1 - p)
    Q[3, 4] = r
    Q[4, 5] = r  # the small job leaves, the big one enters
    # the big job leaves: two reveals; (small, small), (small, big) or big
    Q[5, 0] = mu * p * p
    Q[5, 3] = mu * p * (1 - p)
    Q[5, 5] += mu * (1 - p)  # the next big one enters at once: same state
    np.fill_diagonal(Q, 0.0)
    Q -= np.diag(Q.sum(1))
    A = np.vstack([Q.T, np.ones(6)])
    phi = np.linalg.lstsq(A, np.r_[np.zeros(6), 1.0], rcond=None)[0]
    dep = np.array([0, r, 2 * r, 0, r, mu])
    ref = phi @ dep
    w = Workload(2, [1, 2], [p, 1 - p], [Erlang(2, 2 / r), Exponential(1 / mu)])
    np.testing.assert_allclose(float(exact_lambda_c(w)), ref, rtol=1e-10)


def test_gradients_match_central_differences():
    def lc(lam_scale, mean1, logit):
        p = jax.nn.softmax(jnp.stack([logit, 0.0 * logit, 0.3 + 0.0 * logit]))
        h2 = HyperExponential(jnp.stack([0.5 * lam_scale, mean1]), jnp.array([0.8, 0.2]))
        w = Workload(5, [1, 2, 4], p, [Erlang(2, 1.0), h2, Exponential(1.5)])
        return _ph_lambda_c(w)

    x = (1.0, 3.0, 0.4)
    grads = jax.jit(jax.grad(lc, argnums=(0, 1, 2)))(*x)  # one compiled program
    for i, g in enumerate(grads):
        h = 1e-5
        up, dn = list(x), list(x)
        up[i] += h
        dn[i] -= h
        fd = (float(lc(*up)) - float(lc(*dn))) / (2 * h)
        np.testing.assert_allclose(float(g), fd, rtol=1e-5, atol=1e-12)


def test_refusals_one_line():
    bp = Workload(4, [1, 2], [0.5, 0.5], [Exponential(1.0), BoundedPareto(0.5, 20.0, 1.5)])
    with pytest.raises(ValueError, match="not phase-type") as err:
        exact_lambda_c(bp)
    assert "\n" not in str(err.value) and "class 1" in str(err.value)
    # beyond the sparse limit (five-class-erlang3, 324,780 phases): test_exact_ph_iad.py
    # the full solver refuses a law without a phase form in the same line
    with pytest.raises(ValueError, match="not phase-type") as err:
        exact(bp, 0.1)
    assert "\n" not in str(err.value)


def test_float32_laws_are_solved_like_float64_ones():
    """A hyperexponential law in float32 (its branch probabilities sum to 1 within float32
    rounding, 2.2e-8 off for 0.1 + 0.9) is solved, not refused as a malformed phase form, and
    gives the float64 law's answer to float32 accuracy; five-class-hyperexp is refused for its
    size, not for its form."""

    def wl(dtype):
        law = HyperExponential(np.array([0.5, 2.0], dtype), np.array([0.1, 0.9], dtype))
        return Workload(3, [1, 2], [0.7, 0.3], [Erlang(2, 1.0), law])

    w32, w64 = (float(exact(wl(d), 0.4).wait_mean) for d in (np.float32, np.float64))
    assert abs(w32 - w64) <= 1e-5 * w64
    with pytest.raises(ValueError, match="25,263 phases"):
        exact(scenarios.get("five-class-hyperexp"), 1.0)


def test_stability_limit_is_exact_for_small_phase_type():
    w = Workload(4, [1, 2], [0.6, 0.4], [Erlang(3, 1.0), H2])
    res = stability_limit(w)
    assert res.method == "exact" and res.lambda_c == pytest.approx(float(exact_lambda_c(w)))


def test_phase_forms_have_the_laws_moments():
    from jaxqueue.dist import PhaseCount

    cox = Coxian(np.array([2.0, 0.5, 3.0]), np.array([0.3, 0.6]))
    for law in (
        Exponential(0.7),
        Erlang(3, 1.7),
        H2,
        PhaseCount(0.2, np.array([1, 4]), [0.5, 0.5]),
        cox,
    ):
        a, T = (np.asarray(x, dtype=float) for x in law.phase_form())
        m1 = a @ np.linalg.solve(-T, np.ones(len(a)))
        m2 = 2 * a @ np.linalg.solve(-T, np.linalg.solve(-T, np.ones(len(a))))
        np.testing.assert_allclose([m1, m2 - m1**2], [law.mean(), law.var()], rtol=1e-12)
    with pytest.raises(ValueError, match="not a phase-type law"):
        BoundedPareto(0.5, 20.0, 1.5).phase_form()
    # the Coxian's sampler has its mean
    u = jax.random.uniform(jax.random.key(0), (200_000, cox.n_uniforms), minval=1e-300)
    np.testing.assert_allclose(float(cox.from_uniforms(u).mean()), float(cox.mean()), rtol=0.02)


SMALL_PH = {
    "e2-h2-s4": (4, [1, 2], [0.6, 0.4], [Erlang(2, 1.0), H2]),
    "h2-e3-exp-s6": (6, [1, 3, 4], [0.5, 0.3, 0.2], [H2, Erlang(3, 2.0), Exponential(0.8)]),
    "e3-h2-s5": (5, [2, 3], [0.7, 0.3], [Erlang(3, 0.6), HyperExponential([0.2, 4.0], [0.9, 0.1])]),
    "exp-e2-h2-s6": (6, [1, 2, 6], [0.6, 0.3, 0.1], [Exponential(1.0), Erlang(2, 1.5), H2]),
    "cox-exp-s5": (5, [1, 2], [0.7, 0.3], [Coxian([2.0, 0.5], [0.4]), Exponential(1.2)]),
}


@pytest.mark.parametrize("name", sorted(SMALL_PH))
def test_lambda_c_equals_brute_force_ctmc(name):
    """Against the explicit saturated queue of ``tests/references/mjqm_ph_ctmc.py`` (its own
    enumeration of (serving, head) states, written separately)."""
    from tests.references.mjqm_ph_ctmc import lambda_c as reference_lambda_c

    s, cores, probs, laws = SMALL_PH[name]
    forms = [tuple(np.asarray(x, dtype=float) for x in law.phase_form()) for law in laws]
    ref = reference_lambda_c(s, cores, probs, [a for a, _ in forms], [T for _, T in forms])
    got = float(exact_lambda_c(Workload(s, cores, probs, laws)))
    np.testing.assert_allclose(got, ref, rtol=1e-9)


def test_cli_stability_exact_for_phase_type_file(tmp_path, capsys):
    import json

    from jaxqueue.cli import main

    f = tmp_path / "ph.toml"
    f.write_text(
        "servers = 4\n"
        '[[classes]]\ncores = 1\nprob = 0.6\nlaw = "erlang"\nmean = 1.0\nk = 2\n'
        '[[classes]]\ncores = 2\nprob = 0.3\nlaw = "hyperexponential"\nprobs = [0.8, 0.2]\n'
        "means = [0.5, 3.0]\n"
        '[[classes]]\ncores = 3\nprob = 0.1\nlaw = "coxian"\nrates = [2.0, 0.5]\ncont = [0.4]\n'
    )
    assert main(["mjqm", "stability", "--scenario", str(f), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cox = Coxian(np.array([2.0, 0.5]), np.array([0.4]))
    w = Workload(4, [1, 2, 3], [0.6, 0.3, 0.1], [Erlang(2, 1.0), H2, cox])
    assert out["method"] == "exact" and out["status"] == "ok"
    assert out["lambda_c"] == pytest.approx(float(exact_lambda_c(w)), rel=1e-12)
    assert out["lambda_c_ci"] == [out["lambda_c"], out["lambda_c"]]


SENS_PROBS = np.array([0.6, 0.4])


def _sens_workload(scale=(1.0, 1.0), p=SENS_PROBS):
    laws = [
        Erlang(2, 1.0 * scale[0]),
        HyperExponential(np.array([0.4, 3.0]) * scale[1], np.array([0.7, 0.3])),
    ]
    return Workload(3, [1, 2], list(p), laws)


def test_scaled_phase_type_laws_equal_laws_built_with_scaled_means():
    """The service scales of ``exact_sensitivity`` divide each sub-generator: the mean wait
    equals that of the laws built again with scaled means (fast guard of the slow test below)."""
    from jaxqueue.mjqm._exact import scaled_wait_mean

    f, data = scaled_wait_mean(_sens_workload())
    got = f(data, jnp.asarray(0.45), jnp.asarray([0.9, 1.1]), jnp.asarray(SENS_PROBS))
    want = exact(_sens_workload(scale=(0.9, 1.1)), 0.45).wait_mean
    assert float(got) == pytest.approx(float(want), rel=1e-12)


@pytest.mark.slow
def test_exact_sensitivity_of_phase_type_laws_matches_central_differences():
    """``exact_sensitivity`` on Erlang and hyperexponential laws (sub-generators divided by the
    scales) against central differences of :func:`exact` on workloads whose laws are built
    again with scaled means and whose class probabilities are moved along a logit."""
    from jaxqueue.mjqm import exact_sensitivity

    probs, lam, h, wl = SENS_PROBS, 0.45, 1e-5, _sens_workload

    def f(lam_=lam, **kw):
        return float(exact(wl(**kw), lam_).response_mean)

    ex = exact_sensitivity(wl(), lam, "response_mean")
    assert ex["value"] == pytest.approx(f(), rel=1e-12)
    assert ex["lam"] == pytest.approx((f(lam + h) - f(lam - h)) / (2 * h), rel=1e-5)
    e = np.array([0.0, 1.0])  # the hyperexponential class (two phases)
    fd = (f(scale=1 + h * e) - f(scale=1 - h * e)) / (2 * h)
    assert ex["scale"][1] == pytest.approx(fd, rel=1e-5)
    up, dn = probs * np.exp(h * e), probs * np.exp(-h * e)
    fd = (f(p=up / up.sum()) - f(p=dn / dn.sum())) / (2 * h)
    assert ex["logits"][1] == pytest.approx(fd, rel=1e-5)
    assert np.sum(ex["logits"]) == pytest.approx(0.0, abs=1e-8)  # softmax: shifts cancel
