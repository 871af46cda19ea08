"""``exact_lambda_c`` of the largest phase-type chains: aggregation-disaggregation (``_iad``)
and, for its gradient, the two-level solve of Poisson's equation (``_poisson_two_level``).

References: the independent brute-force saturated chain of ``tests/references/mjqm_ph_ctmc.py``
and the sparse LU of the same chain (the aggregation forced on a small chain), central
differences of ``exact_lambda_c`` for the gradient of ``five-class-erlang3`` (slow), and, for
``five-class-erlang3`` (324,780 head phases) and ``five-class-hyperexp`` (25,263, GMRES), both
slow, the pile-growth intervals recorded in ``benchmarks/RESULTS.md`` (``bench_mjqm_backward``:
1.8479 [1.8398, 1.8561] and 1.5172 [1.5046, 1.53]; 95% intervals, inside the 99% ones).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue import scenarios
from jaxqueue.dist import Coxian, Erlang, HyperExponential
from jaxqueue.mjqm import Workload, exact_lambda_c
from jaxqueue.mjqm._exact import _ph
from jaxqueue.mjqm._exact._ph_structure import ph_structure
from tests.references import mjqm_ph_ctmc as ref

MEANS = (0.5, 0.83, 1.25)


def test_aggregation_equals_the_sparse_lu_and_the_brute_force(monkeypatch):
    w = Workload(8, [1, 2, 5], [0.6, 0.25, 0.15], [Erlang(3, m) for m in MEANS])
    lu = float(exact_lambda_c(w))
    monkeypatch.setattr(_ph, "IAD_MIN", 0)
    iad = float(exact_lambda_c(w))
    laws = [ref.erlang(3, m) for m in MEANS]
    brute = ref.lambda_c(8, [1, 2, 5], [0.6, 0.25, 0.15], *zip(*laws, strict=True))
    assert abs(iad - lu) <= 1e-10 * lu
    assert abs(iad - brute) <= 1e-10 * brute


def _rates_of(w):
    """The saturated chain's structure and rates of ``w`` (numpy)."""
    key = _ph.ph_key(w, w.servers[0], tuple(int(c[0]) for c in w.cores))
    st = ph_structure(key)
    return st, [np.asarray(v) for v in _ph.ph_rates(st, w)]


def _e3_small(x, p0, q0=0.6):
    """Three classes of Table 2's shape on 8 servers (1,724 head phases): class 0's first phase
    rate ``x`` (a Coxian with the Erlang-3 structure), class 0's probability ``p0``."""
    cox = Coxian(jnp.stack([x, 6.0, 6.0]), jnp.array([1.0, 1.0]))
    laws = [cox, Erlang(3, MEANS[1]), Erlang(3, MEANS[2])]
    return Workload(8, [1, 2, 5], jnp.stack([p0, 0.85 - p0, jnp.asarray(0.15)]), laws)


def test_two_level_poisson_equals_the_sparse_lu(monkeypatch):
    """Beyond ``IAD_MIN`` phases ``phi`` comes from aggregation and ``h`` (Poisson's equation
    of the adjoint) from the two-level method of the same aggregates: forced on a chain the
    direct LU solves, ``phi``, ``h`` and the gradient of ``lambda_c`` in a phase rate and a
    class probability equal the LU's to 1e-8."""
    st, v = _rates_of(_e3_small(6.0, 0.6))
    lu_c, lu_phi, lu_h = _ph._host_lambda_c(st, *v)
    calls = []
    two_level = _ph._poisson_two_level
    monkeypatch.setattr(_ph, "_poisson_two_level", lambda *a: calls.append(1) or two_level(*a))

    def lc(x, p0):
        return exact_lambda_c(_e3_small(x, p0))

    lu_grad = jax.grad(lc, argnums=(0, 1))(6.0, 0.6)
    assert not calls
    monkeypatch.setattr(_ph, "IAD_MIN", 0)
    it_c, it_phi, it_h = _ph._host_lambda_c(st, *v)
    it_grad = jax.grad(lc, argnums=(0, 1))(6.0, 0.6)
    assert len(calls) == 2  # the direct call and the gradient's
    assert abs(it_c - lu_c) <= 1e-10 * lu_c
    assert np.abs(it_phi - lu_phi).max() <= 1e-8 * np.abs(lu_phi).max()
    assert it_h[0] == 0.0 and np.abs(it_h - lu_h).max() <= 1e-8 * np.abs(lu_h).max()
    for g, want in zip(it_grad, lu_grad, strict=True):
        assert abs(float(g) - float(want)) <= 1e-8 * abs(float(want)), (g, want)


def test_gradients_stop_at_the_aggregation_limit():
    """Beyond ``MAX_PH_PHASES`` (Erlang-4 on Table 2: 2,652,711 phases) ``lambda_c`` and its
    gradient are refused in one line naming the phases and the limit."""
    e3 = scenarios.get("five-class-erlang3")

    def lc(x):
        laws = [Erlang(4, law.mean_ * x) for law in e3.services]
        return exact_lambda_c(Workload(e3.servers, e3.cores, e3.probs, laws))

    with pytest.raises(ValueError, match="2,652,711 phases") as err:
        jax.grad(lc)(1.0)
    assert "\n" not in str(err.value) and "limit 400,000 phases" in str(err.value)


@pytest.mark.slow
def test_five_class_erlang3_gradient_matches_central_differences():
    """``d lambda_c`` of ``five-class-erlang3`` (324,780 phases: aggregation for ``phi``, the
    two-level method for ``h``) in class 0's first phase rate (a Coxian with its Erlang-3
    structure) and in class 0's probability (against the last class's) equals central
    differences of ``exact_lambda_c`` to 1e-5 relative. The fast guard is
    ``test_two_level_poisson_equals_the_sparse_lu`` (same solvers, same adjoint)."""
    e3 = scenarios.get("five-class-erlang3")
    probs = np.asarray(e3.probs, float)
    r0 = 3.0 / float(e3.services[0].mean_)

    def lc(x, p0):
        cox = Coxian(jnp.stack([x, r0, r0]), jnp.array([1.0, 1.0]))
        p = jnp.concatenate([jnp.stack([p0]), probs[1:4], jnp.stack([probs[0] + probs[4] - p0])])
        return exact_lambda_c(Workload(e3.servers, e3.cores, p, [cox, *e3.services[1:]]))

    x0 = (r0, float(probs[0]))
    grads = jax.grad(lc, argnums=(0, 1))(*x0)
    for i, g in enumerate(grads):
        step = 1e-4 * x0[i]
        up, dn = list(x0), list(x0)
        up[i] += step
        dn[i] -= step
        fd = (float(lc(*up)) - float(lc(*dn))) / (2 * step)
        assert abs(float(g) - fd) <= 1e-5 * abs(fd), (i, float(g), fd)


@pytest.mark.slow
def test_five_class_erlang3_is_inside_the_pile_growth_interval(capsys):
    """``mjqm stability`` gives the exact limit of ``five-class-erlang3`` (aggregation), inside
    the pile-growth interval; the fast guard is the aggregation test above."""
    _check_stability_exact("five-class-erlang3", 1.8398, 1.8561, capsys)


@pytest.mark.slow
def test_five_class_hyperexp_is_inside_the_pile_growth_interval(capsys):
    """``mjqm stability`` gives the exact limit of ``five-class-hyperexp`` (GMRES + incomplete
    LU), inside the pile-growth interval; the fast guard is
    ``test_gmres_equals_the_sparse_lu_and_the_brute_force``."""
    _check_stability_exact("five-class-hyperexp", 1.5046, 1.53, capsys)


def _check_stability_exact(name, lo, hi, capsys):
    import json

    from jaxqueue.cli import main

    assert main(["mjqm", "stability", "--scenario", name, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "exact" and out["status"] == "ok"
    lc = out["lambda_c"]
    assert np.isfinite(lc) and lo <= lc <= hi, lc
    assert out["lambda_c_ci"] == [lc, lc]


def test_gmres_equals_the_sparse_lu_and_the_brute_force(monkeypatch):
    """The GMRES + incomplete-LU solve (five-class-hyperexp's path, beyond ``DIRECT_MAX``
    unknowns) forced on a small chain: lambda_c and its gradient in a mean (the second solve,
    the Poisson equation of the adjoint) equal the direct LU's, lambda_c the brute force's."""
    h2 = ([0.01, 0.99], [40.0, 0.3])

    def lc(x):
        laws = [Erlang(3, MEANS[0] * x), HyperExponential(*h2[::-1]), Erlang(3, MEANS[2])]
        return exact_lambda_c(Workload(8, [1, 2, 5], [0.6, 0.25, 0.15], laws))

    lu, lu_grad = (float(y) for y in jax.value_and_grad(lc)(1.0))
    monkeypatch.setattr(_ph, "DIRECT_MAX", 0)
    it, it_grad = (float(y) for y in jax.value_and_grad(lc)(1.0))
    laws = [ref.erlang(3, MEANS[0]), ref.hyperexp(*h2), ref.erlang(3, MEANS[2])]
    brute = ref.lambda_c(8, [1, 2, 5], [0.6, 0.25, 0.15], *zip(*laws, strict=True))
    assert abs(it - lu) <= 1e-10 * lu and abs(it - brute) <= 1e-10 * brute
    assert abs(it_grad - lu_grad) <= 1e-8 * abs(lu_grad), (it_grad, lu_grad)


def test_an_unconverged_iterative_solve_is_refused_under_jit_and_grad(monkeypatch):
    """An iterative solve that does not converge gives ``nan`` on the host; under ``jax.jit``
    (the value) and ``jax.grad`` (the adjoint's ``h``) that is a one-line refusal, never a
    ``nan`` returned as a number."""
    monkeypatch.setattr(_ph, "IAD_MIN", 0)
    monkeypatch.setattr(_ph, "_poisson_two_level", lambda st, F, A, C, q, phi, b: b * np.nan)

    def lc(x, p0):
        return exact_lambda_c(_e3_small(x, p0))

    assert np.isfinite(float(jax.jit(lc)(6.0, 0.6)))  # the value needs no h
    with pytest.raises(Exception, match="jaxqueue refused the input.*Poisson's equation"):
        jax.grad(lc)(6.0, 0.6)
    monkeypatch.setattr(_ph, "_iad", lambda st, F, A, C, q: np.full(st.nh, np.nan))
    with pytest.raises(Exception, match="jaxqueue refused the input.*did not converge"):
        jax.jit(lc)(6.0, 0.6)
    with pytest.raises(ValueError, match="did not converge"):
        exact_lambda_c(_e3_small(jnp.asarray(6.0), jnp.asarray(0.6)))
