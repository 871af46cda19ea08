"""Acceptance tests of the exact FCFS MJQM solver (``jaxqueue.mjqm.exact``).

References, none of them from the package's solver:

* ``tests/references/mjqm_ctmc.py``: a brute-force CTMC of the explicit queue (the ordered
  classes of the waiting jobs), itself checked first against Erlang C, M/M/1 and the M/G/1
  mean-value formula;
* closed forms: Erlang C (M/M/c), M/M/1 (jobs asking for all servers), Pollaczek-Khinchine
  (all classes ask for all servers: an M/G/1 with hyperexponential service), eq. (8) for
  one-or-all workloads (``lambda_c_closed_form``);
* the departure rate of the saturated queue (the queue never empties, the classes of the jobs
  reaching the head are i.i.d.), the saturated chain of ``tests/references/mjqm_ctmc.py``;
* Little's law and the busy-server identity; central finite differences for the gradients.

The explicit queue has ``K^q`` orderings of ``q`` waiting jobs, so the brute force only reaches
truncation masses of 1e-10 to 1e-12 at light loads (5 to 20 % of ``lambda_c``); the heavy
loads are covered by the closed forms and identities.
"""

from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue import scenarios
from jaxqueue.dist import BoundedPareto, Deterministic, Erlang, Exponential
from jaxqueue.mjqm import Workload, exact, exact_lambda_c, lambda_c_closed_form
from tests.references.mjqm_ctmc import (
    MJQMResult,
    erlang_c,
    fcfs_saturated_throughput,
    solve_mjqm,
)
from tests.references.mjqm_ctmc_values import EXACT_CASES_CTMC

FIELDS = MJQMResult.FIELDS  # the metrics both solvers report

# one compiled solver per structure (s, cores), shared by the tests of a process
_exact_jit = jax.jit(exact)


def workload(s, cores, probs, means, **kw) -> Workload:
    return Workload(s, cores, probs, [Exponential(m) for m in means], **kw)


# ----------------------------------------------------------------- the saturated queue
def saturated_lambda_c(s, cores, probs, means) -> float:
    """``lambda_c``: the throughput of the saturated FCFS queue (the reference CTMC's)."""
    return fcfs_saturated_throughput(s, cores, probs, [1.0 / m for m in means])


# ------------------------------------------------------------------ brute force alone
@pytest.mark.parametrize("c", [1, 3, 5])
def test_ctmc_erlang_c(c):
    lam = 0.5 * c / 1.3
    ref = solve_mjqm(c, [1], [1.0], [1.3], lam)
    assert ref.truncation_mass < 1e-12
    pw, w = erlang_c(c, lam, 1.3)
    np.testing.assert_allclose([ref.p_wait, ref.wait_mean], [pw, w], rtol=1e-9)
    np.testing.assert_allclose(ref.idle_servers, c - lam * 1.3, rtol=1e-11)


def test_ctmc_all_core_is_mm1_and_mg1():
    # one class asking for all 3 servers: M/M/1 with rho = lam m
    lam, m = 0.4, 1.0
    ref = solve_mjqm(3, [3], [1.0], [m], lam)
    rho = lam * m
    np.testing.assert_allclose(ref.wait_mean, rho * m / (1 - rho), rtol=1e-9)
    np.testing.assert_allclose(ref.hol_idle_servers, 0.0, atol=1e-14)
    # two classes asking for all servers: M/G/1 with hyperexponential service (P-K formula;
    # FCFS: every class waits the same on average)
    p, means = np.array([0.3, 0.7]), np.array([2.0, 0.5])
    lam = 0.1
    ref = solve_mjqm(2, [2, 2], p, means, lam)
    assert ref.truncation_mass < 1e-12
    rho = lam * p @ means
    w = lam * (p @ (2 * means**2)) / (2 * (1 - rho))
    np.testing.assert_allclose(ref.wait_mean_class, [w, w], rtol=1e-9)
    np.testing.assert_allclose(ref.p_wait, rho, rtol=1e-9)


def test_ctmc_little_and_busy_servers():
    s, cores, p, means = 4, np.array([1, 2]), np.array([0.6, 0.4]), np.array([1.0, 2.0])
    lam = 0.15
    ref = solve_mjqm(s, cores, p, means, lam)
    np.testing.assert_allclose(ref.jobs_mean, lam * (ref.wait_mean + p @ means), rtol=1e-9)
    np.testing.assert_allclose(s - ref.idle_servers, lam * p @ (cores * means), rtol=1e-9)
    np.testing.assert_allclose(ref.jobs_service_class, lam * p * means, rtol=1e-9)
    # a tighter truncation moves nothing beyond its mass
    tight = solve_mjqm(s, cores, p, means, lam, tol=1e-13)
    for k in FIELDS:
        np.testing.assert_allclose(getattr(ref, k), getattr(tight, k), rtol=1e-8, err_msg=k)


def test_saturated_lambda_c_closed_forms():
    # all-core jobs only: 1 / E[sigma]; one-or-all: eq. (8)
    np.testing.assert_allclose(saturated_lambda_c(3, [3, 3], [0.5, 0.5], [1.0, 3.0]), 0.5)
    w = workload(4, [1, 4], [0.8, 0.2], [1.0, 2.0])
    np.testing.assert_allclose(
        saturated_lambda_c(4, [1, 4], [0.8, 0.2], [1.0, 2.0]), lambda_c_closed_form(w), rtol=1e-12
    )
    # without big jobs the saturated queue uses every server: s / E[a sigma]
    np.testing.assert_allclose(saturated_lambda_c(3, [1], [1.0], [2.0]), 1.5, rtol=1e-12)


# ------------------------------------------------------------- (a) exact vs brute force
# (s, cores, probs, means); the loads are fractions of lambda_c (from saturated_lambda_c),
# each with the truncation mass the brute force must reach (its metrics are then within a few
# hundred times that mass, relative: far inside the 1e-6 asked of the solver)
SYSTEMS = {
    "s4-c12": (4, [1, 2], [0.6, 0.4], [1.0, 2.0]),
    "s3-c13-allcore": (3, [1, 3], [0.7, 0.3], [1.0, 1.0]),
    "s5-c23": (5, [2, 3], [0.5, 0.5], [1.0, 1.5]),
    "s3-c123": (3, [1, 2, 3], [0.6, 0.3, 0.1], [1.0, 0.7, 1.5]),
    "s6-c235": (6, [2, 3, 5], [0.5, 0.3, 0.2], [1.0, 0.5, 0.8]),
}
CASES = [
    ("s4-c12", 0.05, 1e-12),
    ("s4-c12", 0.1, 1e-12),
    ("s3-c13-allcore", 0.1, 1e-10),
    ("s3-c13-allcore", 0.15, 1e-10),
    ("s5-c23", 0.05, 1e-12),
    ("s5-c23", 0.1, 1e-12),
    ("s3-c123", 0.03, 1e-10),
    ("s3-c123", 0.05, 1e-10),
]
SLOW_CASES = [
    ("s3-c13-allcore", 0.2, 1e-10),
    ("s4-c12", 0.15, 1e-10),
    ("s6-c235", 0.05, 1e-10),
]


def _ids(cases):
    return [pytest.param(*c, id=f"{c[0]}-{c[1]}") for c in cases]


def _ctmc(name, f, tol) -> tuple[float, dict]:
    """``lam`` and the brute force's ``(truncation_mass, FIELDS)`` at ``f lambda_c``."""
    s, cores, probs, means = SYSTEMS[name]
    lam = f * saturated_lambda_c(s, cores, probs, means)
    ref = solve_mjqm(s, cores, probs, means, lam, tol=tol, max_states=400_000)
    return lam, {"truncation_mass": ref.truncation_mass, **ref.as_dict()}


def _compare_with_ctmc(name, f, tol):
    """Against the chain's tabulated answers (``EXACT_CASES_CTMC``) for the default cases."""
    s, cores, probs, means = SYSTEMS[name]
    if (name, f) in EXACT_CASES_CTMC:
        lam, ref = f * saturated_lambda_c(s, cores, probs, means), EXACT_CASES_CTMC[name, f]
    else:
        lam, ref = _ctmc(name, f, tol)
    assert ref["truncation_mass"] < tol
    res = _exact_jit(workload(s, cores, probs, means), lam)
    assert res.status == "ok" and isinstance(res.phases, int) and res.phases > 0
    for k in FIELDS:
        np.testing.assert_allclose(
            np.asarray(getattr(res, k)), ref[k], rtol=1e-6, atol=0, err_msg=k
        )


@pytest.mark.parametrize(("name", "f", "tol"), _ids(CASES))
def test_exact_vs_ctmc(name, f, tol):
    _compare_with_ctmc(name, f, tol)


@pytest.mark.slow
def test_tabulated_ctmc_is_what_the_chain_gives():
    assert {(n, f) for n, f, _ in CASES} == set(EXACT_CASES_CTMC)
    for name, f, tol in CASES:
        _, ref = _ctmc(name, f, tol)
        for k, v in EXACT_CASES_CTMC[name, f].items():
            # the chain's solve moves in the last digits with the CPU and the BLAS build (1e-12
            # relative seen); the truncation mass (as small as 1e-15, a sum of the smallest
            # probabilities) matters only against the truncation tolerance
            atol = 1e-6 * tol if k == "truncation_mass" else 0.0
            np.testing.assert_allclose(ref[k], v, rtol=1e-10, atol=atol, err_msg=f"{name} {f} {k}")


@pytest.mark.slow
@pytest.mark.parametrize(("name", "f", "tol"), _ids(SLOW_CASES))
def test_exact_vs_ctmc_heavier(name, f, tol):
    _compare_with_ctmc(name, f, tol)


# ------------------------------------------------------------------ (b) closed forms
@pytest.mark.parametrize(("c", "rho"), [(1, 0.8), (3, 0.7), (5, 0.75)])
def test_exact_erlang_c(c, rho):
    m = 0.8
    lam = rho * c / m
    res = _exact_jit(workload(c, [1], [1.0], [m]), lam)
    pw, w = erlang_c(c, lam, m)
    np.testing.assert_allclose(float(res.p_wait), pw, rtol=1e-10)
    np.testing.assert_allclose(float(res.wait_mean), w, rtol=1e-10)
    np.testing.assert_allclose(float(res.lambda_c), c / m, rtol=1e-10)


@pytest.mark.parametrize("s", [1, 4])
def test_exact_mm1(s):
    # one server, or jobs that all ask for all s servers: M/M/1
    mu, lam = 1.5, 1.2
    res = _exact_jit(workload(s, [s], [1.0], [1 / mu]), lam)
    rho = lam / mu
    np.testing.assert_allclose(float(res.wait_mean), rho / (mu - lam), rtol=1e-10)
    np.testing.assert_allclose(float(res.p_wait), rho, rtol=1e-10)
    np.testing.assert_allclose(float(res.idle_servers), s * (1 - rho), rtol=1e-10)
    np.testing.assert_allclose(float(res.hol_idle_servers), 0.0, atol=1e-12)


def test_exact_all_core_classes_pollaczek_khinchine():
    # every class asks for all 3 servers: M/G/1 with hyperexponential service
    p, means = np.array([0.3, 0.7]), np.array([2.0, 0.5])
    rho = 0.8
    lam = rho / (p @ means)
    res = _exact_jit(workload(3, [3, 3], p, means), lam)
    w = lam * (p @ (2 * means**2)) / (2 * (1 - rho))
    np.testing.assert_allclose(np.asarray(res.wait_mean_class), [w, w], rtol=1e-10)
    np.testing.assert_allclose(float(res.p_wait), rho, rtol=1e-10)
    np.testing.assert_allclose(float(res.lambda_c), 1 / (p @ means), rtol=1e-10)


# --------------------------------------------------------------- (c) stability limit
@pytest.mark.parametrize(
    ("s", "p_big", "means"),
    [(4, 0.2, (1.0, 2.0)), (8, 0.1, (0.5, 5.0)), (8, 0.5, (2.0, 0.5))],
)
def test_exact_lambda_c_one_or_all(s, p_big, means):
    w = workload(s, [1, s], [1 - p_big, p_big], means)
    np.testing.assert_allclose(
        float(exact_lambda_c(w)), lambda_c_closed_form(w), rtol=1e-10, atol=0
    )


def test_exact_lambda_c_two_class_256():
    w = scenarios.get("two-class-256")
    closed = lambda_c_closed_form(w)
    assert closed is not None
    np.testing.assert_allclose(float(exact_lambda_c(w)), closed, rtol=1e-10, atol=0)


@pytest.mark.parametrize(
    "sys_",
    [
        (4, [1, 2], [0.6, 0.4], [1.0, 2.0]),
        (5, [2, 3], [0.5, 0.5], [1.0, 1.5]),
        (6, [1, 3, 6], [0.5, 0.3, 0.2], [1.0, 0.5, 2.0]),
    ],
    ids=["s4-c12", "s5-c23", "s6-c136"],
)
def test_exact_lambda_c_saturated(sys_):
    lc = float(exact_lambda_c(workload(*sys_)))
    np.testing.assert_allclose(lc, saturated_lambda_c(*sys_), rtol=1e-10, atol=0)
    # HOL blocking costs capacity: below s / E[a sigma] unless every job fits everywhere
    s, cores, p, m = sys_
    assert lc < s / (np.asarray(p) @ (np.asarray(cores) * np.asarray(m)))


# ------------------------------------------------------------------ (d) identities
def _identities(w: Workload, res, lam):
    p = np.asarray(w.probs, float)
    m = np.asarray(w.mean_service(), float)
    a = np.asarray(w.cores)[:, 0]
    np.testing.assert_allclose(
        float(res.jobs_mean), lam * (float(res.wait_mean) + p @ m), rtol=1e-9, err_msg="Little"
    )
    np.testing.assert_allclose(
        w.s - float(res.idle_servers), lam * p @ (a * m), rtol=1e-9, err_msg="busy servers"
    )
    np.testing.assert_allclose(
        float(res.wait_mean), p @ np.asarray(res.wait_mean_class), rtol=1e-9, err_msg="W"
    )
    np.testing.assert_allclose(
        float(res.jobs_waiting_mean), lam * float(res.wait_mean), rtol=1e-9, err_msg="Lq"
    )
    assert 0 <= float(res.hol_idle_servers) <= float(res.idle_servers)
    assert 0 < float(res.p_wait) < 1


def test_exact_identities_small():
    w = workload(4, [1, 2], [0.6, 0.4], [1.0, 2.0])
    lam = 0.8 * float(exact_lambda_c(w))
    _identities(w, _exact_jit(w, lam), lam)


@pytest.mark.slow
def test_exact_identities_five_class_exp():
    w = scenarios.get("five-class-exp")
    lam = 0.5 * float(exact_lambda_c(w))
    _identities(w, exact(w, lam), lam)


# ------------------------------------------------------------------- (e) gradients
@pytest.mark.slow
def test_exact_gradients_match_finite_differences():
    """(Slow: a compile of the jitted gradient.) The default suite: the gradient of the same
    solve on the same workload (4 servers, classes of 1 and 2 cores) against central
    differences in ``tests/mjqm/test_sensitivity.py::test_exact_derivatives_agree_with_central_
    differences`` (``exact_sensitivity``: ``jax.value_and_grad`` of ``exact``'s mean wait)."""

    def wait(x):  # x = (lam, mean of class 1, shift of probability from class 1 to class 0)
        lam, m1, t = x[0], x[1], x[2]
        w = Workload(4, [1, 2], jnp.stack([0.6 + t, 0.4 - t]), [Exponential(1.0), Exponential(m1)])
        return exact(w, lam).wait_mean

    def wait_concrete(x):  # the same from concrete numbers, by the shared compiled solver
        lam, m1, t = (float(v) for v in x)  # Python floats, as in the other tests: no recompile
        w = workload(4, [1, 2], [0.6 + t, 0.4 - t], [1.0, m1])
        return float(_exact_jit(w, lam).wait_mean)

    x0 = np.array([0.9, 2.0, 0.0])
    grad = np.asarray(jax.jit(jax.grad(wait))(jnp.asarray(x0)))
    for i, h in enumerate([0.9e-5, 2.0e-5, 1e-5]):
        e = np.zeros(3)
        e[i] = h
        fd = (wait_concrete(x0 + e) - wait_concrete(x0 - e)) / (2 * h)
        np.testing.assert_allclose(grad[i], fd, rtol=1e-5, err_msg=f"component {i}")
    assert np.all(grad[:2] > 0)  # more load, longer big jobs: longer waits


# ------------------------------------------------------------------ (f) jit and vmap
def test_exact_jit_vmap_match_eager():
    w = workload(4, [1, 2], [0.6, 0.4], [1.0, 2.0])
    lams = [0.3, 1.4]  # lambda_c = 1.69
    eager = exact(w, lams[1])  # one eager call: the first one in a process compiles every op
    jitted = [_exact_jit(w, lam) for lam in lams]
    vm = jax.jit(jax.vmap(exact, in_axes=(None, 0)))(w, jnp.asarray(lams))
    for k in FIELDS + ("lambda_c",):
        np.testing.assert_allclose(
            np.asarray(getattr(jitted[1], k)), np.asarray(getattr(eager, k)), rtol=1e-12, err_msg=k
        )
        want = np.stack([np.asarray(getattr(r, k)) for r in jitted])
        np.testing.assert_allclose(np.asarray(getattr(vm, k)), want, rtol=1e-12, err_msg=k)
    assert eager.status == "ok" and bool(np.all(np.asarray(vm.stable)))


def _linalg_operand_ranks(jaxpr, out):
    """``(primitive, operand rank)`` of every LU and triangular solve in ``jaxpr`` and the
    jaxprs inside it (loops, conditionals, custom rules)."""

    def inner(v):
        if hasattr(v, "eqns"):
            yield v
        elif hasattr(getattr(v, "jaxpr", None), "eqns"):
            yield v.jaxpr
        elif isinstance(v, (tuple, list)):
            for x in v:
                yield from inner(x)

    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("lu", "triangular_solve"):
            out.append((eqn.primitive.name, eqn.invars[0].aval.ndim))
        for sub in inner(tuple(eqn.params.values())):
            _linalg_operand_ranks(sub, out)
    return out


def test_exact_vmap_factors_one_matrix_at_a_time():
    """Under ``jax.vmap`` the exact solver's LU factorisations and triangular solves take one
    matrix at a time on the CPU (rank-2 operands, in a loop over the loads): XLA:CPU's batched
    LU hung ``jax.vmap(exact)`` on a 2-core machine. The hang itself, on five-class-exp in a
    subprocess: test_exact_vmap_over_loads_does_not_hang (slow)."""
    w = workload(4, [1, 2], [0.6, 0.4], [1.0, 2.0])
    vm = jax.make_jaxpr(jax.vmap(lambda lam: exact(w, lam).wait_mean))(jnp.asarray([0.3, 1.4]))
    ops = _linalg_operand_ranks(vm.jaxpr, [])
    assert {name for name, _ in ops} == {"lu", "triangular_solve"}, ops
    assert all(rank == 2 for _, rank in ops), ops


# ------------------------------------------------------------------- (g) refusals
def _numbers(msg: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+\.?\d*(?:[eE][-+]?\d+)?", msg)]


@pytest.mark.parametrize("factor", [1.0, 1.5])
def test_exact_refuses_unstable_load(factor):
    w = workload(4, [1, 4], [0.8, 0.2], [1.0, 2.0])
    lc = float(exact_lambda_c(w))
    with pytest.raises(ValueError, match="lambda_c") as err:
        exact(w, factor * lc)
    assert any(math.isclose(x, lc, rel_tol=1e-5) for x in _numbers(str(err.value))), str(err.value)


@pytest.mark.parametrize(
    "law",
    [Deterministic(1.0), BoundedPareto(0.5, 20.0, 1.5)],
    ids=["deterministic", "bounded-pareto"],
)
def test_exact_refuses_a_service_law_without_phases(law):
    """Phase-type laws are solved (tests/mjqm/test_exact_ph_solver.py); a law with no phase
    form is refused in one line that points to simulation."""
    w = Workload(4, [1, 2], [0.6, 0.4], [Exponential(1.0), law])
    with pytest.raises(ValueError, match="mjqm simulate|mjqm sample"):
        exact(w, 0.1)


@pytest.mark.parametrize("arrival", [Erlang(2, 1.0), Deterministic(1.0)], ids=["erlang", "det"])
def test_exact_refuses_non_poisson_arrivals(arrival):
    w = workload(4, [1, 2], [0.6, 0.4], [1.0, 2.0], arrival=arrival)
    with pytest.raises(ValueError, match="Poisson"):
        exact(w, 0.1)
    # lambda_c does not depend on the arrival law (mjsre.md Remark 4): same as Poisson
    poisson = workload(4, [1, 2], [0.6, 0.4], [1.0, 2.0])
    assert float(exact_lambda_c(w)) == float(exact_lambda_c(poisson))


_VMAP_FIVE = """
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
from tests.references.mjqm_exact_values import FIVE_CLASS_EXP_EXACT
from jaxqueue import scenarios
from jaxqueue.mjqm import exact
lams = sorted(FIVE_CLASS_EXP_EXACT)[:N_LOADS]
w = jax.jit(jax.vmap(lambda lam: exact(scenarios.get("five-class-exp"), lam).wait_mean))
got = np.asarray(w(jnp.asarray(lams)))
want = np.array([FIVE_CLASS_EXP_EXACT[lam]["wait_mean"] for lam in lams])
np.testing.assert_allclose(got, want, rtol=1e-10)
print("ok")
"""


@pytest.mark.slow
@pytest.mark.parametrize("n_loads", [2, 4], ids=lambda n: f"{n}-loads")
def test_exact_vmap_over_loads_does_not_hang(n_loads):
    """``jax.vmap(exact)`` on five-class-exp (842 phases): with XLA:CPU's batched LU two
    factorisations could wait on each other in a 2-thread pool and the call never returned
    (seen with 2 loads); the LU is now one matrix at a time under ``vmap``. In a subprocess
    with a time limit, so that a hang fails the test instead of the suite. The default suite:
    test_exact_vmap_factors_one_matrix_at_a_time (the unbatched LU) and
    test_exact_jit_vmap_match_eager (``vmap`` over two loads)."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, "-c", f"N_LOADS = {n_loads}\n" + _VMAP_FIVE],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
