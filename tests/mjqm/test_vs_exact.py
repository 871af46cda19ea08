"""The MJQM estimators against the exact solver (``jaxqueue.mjqm.exact``, issue #13).

For Poisson arrivals and exponential services the FCFS multiserver-job queue is a QBD that
:func:`~jaxqueue.mjqm.exact` solves to machine precision, so it is the ground truth here for

* the forward simulator (:func:`~jaxqueue.mjqm.simulate`): per-class mean waits, the overall
  mean wait, the mean number in system and the HOL-idle servers;
* the backward sampler (:func:`~jaxqueue.mjqm.sample_backward` + ``palm_metrics``): per-class
  and overall mean waits, HOL-idle servers and the probability of waiting;
* the stability limit (``stability_limit``, ``pile_growth``) against ``exact_lambda_c``.

Agreement means that the exact value lies in the estimator's interval. A test compares ``m``
quantities at once, each at the Bonferroni level ``1 - 0.01 / m``, so it fails by chance with
probability at most 1%. The workloads: two small ones (``s = 4`` and ``6``, a class needing
every server) at 0.5 and 0.8 of their exact ``lambda_c``, and the acceptance scenario of the
issue, ``five-class-exp`` at the same loads (its exact metrics are tabulated in
``tests/references/mjqm_exact_values.py``: 8 s of solver per load; recomputed by a slow test here).

The backward samples are lower bounds of perfect samples (Algorithm 1 stops at
``M_{2 ell} == M_ell``): Algorithm 1 alone from ``ell0 = 256`` is biased low at 0.8
``lambda_c`` (a strict xfail below); with the batch bias control (the default) the same run
agrees with the exact values.
"""

import functools

import jax
import numpy as np
import pytest
import scipy.stats

from jaxqueue import scenarios
from jaxqueue.dist import Exponential
from jaxqueue.mjqm import (
    Workload,
    exact,
    exact_lambda_c,
    palm_metrics,
    pile_growth,
    sample_backward,
    simulate,
    stability_limit,
    wait_samples,
)
from jaxqueue.mjqm.options import BiasControl
from tests.references.mjqm_exact_values import FIVE_CLASS_EXP_EXACT, FIVE_CLASS_EXP_LAMBDA_C

FAMILY = 0.01  # family-wise false-failure probability of one test (Bonferroni)
FRACTIONS = (0.5, 0.8)  # loads, as fractions of the exact lambda_c

SMALL = {
    # s = 4: one-, two- and four-core jobs (the last ones need every server)
    "s4-1-2-4": Workload(
        4,
        [1, 2, 4],
        [0.6, 0.3, 0.1],
        [Exponential(1.0), Exponential(1.5), Exponential(2.0)],
        name="s4-1-2-4",
    ),
    # s = 6: two-core jobs and jobs needing every server (not one-or-all: no closed form)
    "s6-2-6": Workload(6, [2, 6], [0.8, 0.2], [Exponential(1.0), Exponential(3.0)], name="s6-2-6"),
}
FIVE = "five-class-exp"


def level_for(m: int) -> float:
    """Bonferroni level of each of ``m`` intervals for a family-wise level ``1 - FAMILY``."""
    return 1.0 - FAMILY / m


@functools.cache
def _small_exact(name: str) -> tuple[float, dict]:
    wl = SMALL[name]
    lc = float(exact_lambda_c(wl))
    run = jax.jit(lambda lam: exact(wl, lam))  # one compilation for both loads
    out = {}
    for f in FRACTIONS:
        res = run(f * lc)
        out[f] = {
            "wait_mean_class": np.asarray(res.wait_mean_class),
            "wait_mean": float(res.wait_mean),
            "jobs_mean": float(res.jobs_mean),
            "p_wait": float(res.p_wait),
            "hol_idle_servers": float(res.hol_idle_servers),
        }
    return lc, out


def case(name: str, frac: float) -> tuple[Workload, float, dict]:
    """``(workload, lam, exact metrics)`` at ``frac`` of the exact ``lambda_c``."""
    if name == FIVE:
        lam = frac * FIVE_CLASS_EXP_LAMBDA_C
        return scenarios.get(FIVE), lam, FIVE_CLASS_EXP_EXACT[lam]
    lc, ex = _small_exact(name)
    return SMALL[name], frac * lc, ex[frac]


def check(rows, what: str) -> None:
    """``rows`` of ``(quantity, estimate, (low, high), exact)``: every exact value inside."""
    lines, ok = [], True
    for q, est, (lo, hi), ex in rows:
        inside = bool(lo <= ex <= hi)
        ok &= inside
        lines.append(
            f"  {q:<12} estimate {float(est):.5g} in [{float(lo):.5g}, {float(hi):.5g}]"
            f"  exact {float(ex):.5g}  {'ok' if inside else 'OUTSIDE'}"
        )
    table = "\n".join([what, *lines])
    print(table)
    assert ok, table


# ------------------------------------------------------------------ forward simulation
def forward_vs_exact(name, frac, *, n_jobs, n_replications, seed):
    wl, lam, ex = case(name, frac)
    K = wl.n_classes
    level = level_for(K + 3)
    r = simulate(
        wl, lam, key=jax.random.key(seed), n_jobs=n_jobs, n_replications=n_replications, level=level
    )
    assert r.status == "ok"
    rows = [
        (f"W class {c}", r.wait_mean[c], r.wait_mean_ci[c], ex["wait_mean_class"][c])
        for c in range(K)
    ]
    rows += [
        ("W all", r.wait_mean_all, r.wait_mean_all_ci, ex["wait_mean"]),
        ("L", r.number_in_system, r.number_in_system_ci, ex["jobs_mean"]),
        ("HOL idle", r.hol_idle_servers, r.hol_idle_servers_ci, ex["hol_idle_servers"]),
    ]
    check(rows, f"forward {name} at {frac} lambda_c ({n_replications} x {n_jobs} jobs, {level})")


# The default suite keeps one small workload (s6-2-6: a class needing every server, no closed
# form) at both loads (one compilation); the others run in the slow set, on the same code path.
SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "name, frac",
    [
        ("s6-2-6", 0.5),
        ("s6-2-6", 0.8),
        pytest.param("s4-1-2-4", 0.5, marks=SLOW),
        pytest.param("s4-1-2-4", 0.8, marks=SLOW),
    ],
)
def test_forward_small_matches_exact(name, frac):
    forward_vs_exact(name, frac, n_jobs=20_000, n_replications=64, seed=101)


@pytest.mark.slow
@pytest.mark.parametrize("frac", FRACTIONS)
def test_forward_five_class_matches_exact(frac):
    """The issue's acceptance (forward), default-suite size: half-widths about 8-10%. The
    default suite: five-class-exp (64 replications of 5,000 jobs) against the exact per-class
    waits and HOL-idle servers in
    ``tests/mjqm/test_forward.py::test_five_class_independent_event_simulation``, and every
    row here on s6-2-6 above."""
    forward_vs_exact(FIVE, frac, n_jobs=20_000, n_replications=64, seed=102)


@pytest.mark.slow
@pytest.mark.parametrize("frac", FRACTIONS)
@pytest.mark.parametrize("name", [*SMALL, FIVE])
def test_forward_matches_exact_long(name, frac):
    """The issue's acceptance (forward) for ``five-class-exp``: half-widths about 1%."""
    forward_vs_exact(name, frac, n_jobs=200_000, n_replications=512, seed=103)


# ------------------------------------------------------------------ backward sampling
def backward_vs_exact(name, frac, *, n_samples, seed, ell0=None, bias_control=True):
    """``ell0=None``: the sampler's default first horizon (what ``mjqm sample`` uses)."""
    wl, lam, ex = case(name, frac)
    K = wl.n_classes
    level = level_for(K + 3)
    control = BiasControl() if bias_control else None  # None: Algorithm 1 alone
    kw = {"bias_control": control} if ell0 is None else {"ell0": ell0, "bias_control": control}
    S = sample_backward(wl, lam, n_samples, key=jax.random.key(seed), **kw)
    assert S.status == "ok"
    m = palm_metrics(wl, S, level=level)
    rows = [
        (f"W class {c}", row["wait_mean"], row["wait_mean_ci"], ex["wait_mean_class"][c])
        for c, row in enumerate(m["classes"])
    ]
    # P(an arriving job waits) = E[sum_c p_c 1{W^{alpha_c} > 0}], a Student-t interval
    x = (wait_samples(wl, S) > 0) @ np.asarray(wl.probs, dtype=float)
    hw = scipy.stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    rows += [
        ("W all", m["wait_mean"], m["wait_mean_ci"], ex["wait_mean"]),
        ("HOL idle", m["hol_idle_servers"], m["hol_idle_servers_ci"], ex["hol_idle_servers"]),
        ("P(wait)", x.mean(), (x.mean() - hw, x.mean() + hw), ex["p_wait"]),
    ]
    check(
        rows,
        f"backward {name} at {frac} lambda_c ({n_samples} samples, ell0 {ell0 or 'default'}, "
        f"{level}; mean ell {m['ell_mean']:.0f})",
    )


@pytest.mark.parametrize(
    "name, frac",
    [
        ("s6-2-6", 0.8),
        pytest.param("s6-2-6", 0.5, marks=SLOW),
        pytest.param("s4-1-2-4", 0.5, marks=SLOW),
        pytest.param("s4-1-2-4", 0.8, marks=SLOW),
    ],
)
def test_backward_small_matches_exact(name, frac):
    """The size of the five-class test below (the long tests: 131072 samples). The default
    suite: s6-2-6 at 0.8 ``lambda_c``, where the bias control has the most to do."""
    backward_vs_exact(name, frac, n_samples=2048, seed=201)


@pytest.mark.slow
@pytest.mark.parametrize("frac", FRACTIONS)
def test_backward_five_class_matches_exact(frac):
    """The issue's acceptance (backward), default-suite size: half-widths about 11-20%. The
    default suite: five-class-exp against the exact values in
    ``tests/mjqm/test_backward.py::test_five_class_matches_event_simulation_small`` and the
    default first horizon with every row here on s6-2-6 at 0.8 above."""
    backward_vs_exact(FIVE, frac, n_samples=2048, seed=202)


_ELL0_256_BIAS = (
    "Algorithm 1 alone (no batch bias control) is biased low: five-class-exp at 0.8 lambda_c "
    "with ell0=256, 131072 samples, 99.875% intervals: all jobs 10.632 in [10.480, 10.784] vs "
    "exact 11.162 (-4.7%); with the bias control the same key gives 11.116 in [10.959, 11.279] "
    "(issue 'Estimates that never lie')"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, frac, ell0, bias_control",
    [
        *[(n, f, None, True) for n in [*SMALL, FIVE] for f in FRACTIONS],
        (FIVE, 0.5, 256, True),
        (FIVE, 0.8, 256, True),
        pytest.param(
            FIVE, 0.8, 256, False, marks=pytest.mark.xfail(strict=True, reason=_ELL0_256_BIAS)
        ),
    ],
)
def test_backward_matches_exact_long(name, frac, ell0, bias_control):
    """The issue's acceptance (backward) for ``five-class-exp``: 131072 samples, half-widths
    about 1.5% of the mean wait at 0.8 ``lambda_c``; with the default first horizon, and with
    ``ell0 = 256``, where Algorithm 1's per-sample rule alone is biased low (strict xfail) and
    the batch bias control brings the horizon up until the intervals hold the exact values."""
    backward_vs_exact(name, frac, n_samples=131_072, seed=203, ell0=ell0, bias_control=bias_control)


# ------------------------------------------------------------------ stability limit
@pytest.mark.parametrize(
    "name", [pytest.param("s4-1-2-4", marks=SLOW), "s6-2-6", pytest.param(FIVE, marks=SLOW)]
)
def test_pile_growth_limit_contains_exact(name):
    """Algorithm 2 as ``stability_limit(method="pile-growth")`` runs it (95% interval, float32,
    up to 2^20 jobs) covers the exact limit; ``method="auto"`` takes the exact one. The default
    suite: s6-2-6 (a class needing every server, no closed form); the tabulated five-class
    limit against the solver in ``test_exact_ph.py::test_one_phase_laws_equal_the_exponential_
    qbd``."""
    wl = SMALL[name] if name in SMALL else scenarios.get(name)
    lc = float(exact_lambda_c(wl))
    if name == FIVE:  # the tabulated five-class values are at fractions of this limit
        assert lc == pytest.approx(FIVE_CLASS_EXP_LAMBDA_C, rel=1e-10)
    est = stability_limit(wl, method="pile-growth", key=jax.random.key(0x5AB1E))
    assert est.method == "pile" and stability_limit(wl).method == "exact"
    check([("lambda_c", est.lambda_c, est.lambda_c_ci, lc)], f"pile growth {name}")
    assert est.lambda_lower <= lc < est.lambda_ideal


def test_stability_limit_closed_form_equals_exact():
    """One-or-all exponential workloads: ``stability_limit`` uses eq. (8), which the QBD
    reproduces."""
    wl = Workload(5, [1, 5], [0.9, 0.1], [Exponential(1.0), Exponential(2.0)])
    est = stability_limit(wl)
    assert est.method == "closed-form"
    assert est.lambda_c == pytest.approx(float(exact_lambda_c(wl)), rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("name", [*SMALL, FIVE])
def test_pile_growth_contains_exact_long(name):
    wl = SMALL[name] if name in SMALL else scenarios.get(name)
    r = pile_growth(wl, key=jax.random.key(301), rel_tol=0.002, level=0.99)
    assert r.converged
    check([("lambda_c", r.lambda_c, r.lambda_c_ci, float(exact_lambda_c(wl)))], f"pile {name}")


# ------------------------------------------------------------------ the tabulated values
@pytest.mark.slow
def test_five_class_tabulated_values_are_exact():
    """``tests/references/mjqm_exact_values.py`` holds what the solver gives now (12 digits)."""
    wl = scenarios.get(FIVE)
    assert float(exact_lambda_c(wl)) == pytest.approx(FIVE_CLASS_EXP_LAMBDA_C, rel=1e-12)
    run = jax.jit(lambda lam: exact(wl, lam))
    for lam, tab in FIVE_CLASS_EXP_EXACT.items():
        res = run(lam)
        for k, v in tab.items():
            np.testing.assert_allclose(np.asarray(getattr(res, k)), v, rtol=1e-10, err_msg=k)
