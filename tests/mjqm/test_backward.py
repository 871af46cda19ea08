"""Backward sub-perfect sampling (``papers/mjsre.md`` Algorithm 1) against ground truth.

Ground truths: exact M/M/1, M/D/1 (Pollaczek-Khinchine) and M/M/c (Erlang C) mean waits; the
MJSRE recurrence written out in numpy with a full sort (eq. (2) by definition) on the very
inputs the sampler draws; the Loynes monotonicity (Lemma 4.3); an event-driven simulation of
the queue (``tests/references/mjqm_events.py``) for the five-class scenario and the HOL waste, and
beside it the exact solver (``jaxqueue.mjqm.exact``, tabulated in
``tests/references/mjqm_exact_values.py``; more in ``tests/mjqm/test_vs_exact.py``).
"""

import functools
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue.dist import Deterministic, Exponential
from jaxqueue.mjqm import UnstableLoadError, Workload, stability_limit
from jaxqueue.mjqm._inputs import draw_jobs  # the same jobs as the sampler draws
from jaxqueue.mjqm._palm import palm_metrics, wait_density, wait_samples
from jaxqueue.mjqm.engines.recurrence._backward import loynes_state, sample_backward
from jaxqueue.mjqm.engines.recurrence._step import mjsre_step
from jaxqueue.mjqm.options import Batching, Budget
from jaxqueue.stats import EstimateError, Status
from tests.helpers import assert_within_ci
from tests.references.mjqm_exact_values import FIVE_CLASS_EXP_EXACT, FIVE_CLASS_EXP_LAMBDA_C
from tests.references.mjqm_numpy import _np_step, sample_backward_numpy

FIVE = dict(
    cores=[1, 2, 5, 10, 15],
    probs=[0.5, 0.1, 0.2, 0.19, 0.01],
    means=[0.5, 0.83, 1.25, 3.33, 10.0],
)


def five_class_exp():
    return Workload(20, FIVE["cores"], FIVE["probs"], [Exponential(m) for m in FIVE["means"]])


@functools.cache
def _five_class_run():
    """1024 samples of five-class-exp at 1.2 (read only: shared by the tests of this module
    that need stationary samples of it; one compiled kernel)."""
    return sample_backward(five_class_exp(), 1.2, 1024, key=jax.random.key(13), ell0=256)


def erlang_c_wait(c: int, lam: float, mu: float) -> float:
    a = lam / mu
    rho = a / c
    tail = a**c / math.factorial(c) / (1 - rho)
    p_wait = tail / (sum(a**k / math.factorial(k) for k in range(c)) + tail)
    return p_wait / (c * mu - lam)


# (workload, lam, exact mean wait, exact P(wait = 0)) of the test below
MM_CASES = (
    (Workload(1, [1], [1.0], [Exponential(1.0)]), 0.6, 0.6 / (1 - 0.6), 0.4),
    # M/D/1: E[W] = lam E[sigma^2] / (2 (1 - rho))
    (Workload(1, [1], [1.0], [Deterministic(1.0)]), 0.6, 0.6 / (2 * 0.4), 0.4),
    (Workload(3, [1], [1.0], [Exponential(1.0)]), 2.4, erlang_c_wait(3, 2.4, 1.0), None),
)


def test_mm1_md1_mmc_mean_wait_exact():
    for i, (wl, lam, exact, p0) in enumerate(MM_CASES):
        S = sample_backward(wl, lam, 2048, key=jax.random.key(10 + i), ell0=512)
        assert S.status == "ok" and S.converged.all()
        m = palm_metrics(wl, S, level=0.99)
        assert_within_ci(m["wait_mean"], *m["wait_mean_ci"], exact, what=f"case {i}")
        if p0 is not None:
            # P(wait = 0) = 1 - rho: binomial 99% interval.
            hw = 2.576 * math.sqrt(p0 * (1 - p0) / S.n)
            assert abs(m["classes"][0]["p_wait_zero"] - p0) < hw, (i, m["classes"][0])
        # Little: L = lam (E[W] + E[sigma]).
        assert m["L"] == pytest.approx(lam * (m["wait_mean"] + float(wl.services[0].mean())))


def test_mm1_wait_quantile_exact():
    # M/M/1: P(W > x) = rho exp(-(mu - lam) x), so the 90% quantile is log(rho / 0.1) / (mu - lam).
    wl = Workload(1, [1], [1.0], [Exponential(1.0)])
    S = sample_backward(wl, 0.6, 2048, key=jax.random.key(3), ell0=512)
    m = palm_metrics(wl, S, level=0.99)
    q90 = math.log(0.6 / 0.1) / 0.4
    c = m["classes"][0]
    assert c["wait_p90_ci"][0] <= q90 <= c["wait_p90_ci"][1], c
    # Variance of the M/M/1 wait: E[W^2] - E[W]^2 with E[W^2] = 2 rho / (mu - lam)^2.
    var = 2 * 0.6 / 0.4**2 - (0.6 / 0.4) ** 2
    assert c["wait_var_ci"][0] <= var <= c["wait_var_ci"][1], c


def test_loynes_state_matches_numpy_recurrence_on_same_inputs():
    # The JAX sampler fed jobs -ell..-1 oldest first must equal eq. (2) by definition (sort).
    wl = five_class_exp()
    key = jax.random.key(7)
    ell, lam = 512, 1.2
    ids = np.arange(8)
    got = np.asarray(loynes_state(wl, key, ids, ell, lam, jnp.float64))
    for i in (0, 5):
        x = draw_jobs(wl, lam, key, int(i), -np.arange(1, ell + 1), dtype=jnp.float64)
        W = np.zeros((1, 20))
        for n in range(ell - 1, -1, -1):  # job -(n+1), oldest first
            W = _np_step(
                W,
                np.asarray(x.alpha)[n : n + 1, 0],
                np.asarray(x.sigma)[n : n + 1],
                np.asarray(x.tau)[n : n + 1],
            )
        np.testing.assert_allclose(got[i], W[0], rtol=1e-12, atol=1e-12)


def test_loynes_monotone_and_stopping_rule():
    wl = five_class_exp()
    key = jax.random.key(8)
    ids = np.arange(8)
    lam = 1.7
    M = {ell: np.asarray(loynes_state(wl, key, ids, ell, lam, jnp.float64)) for ell in (256, 512)}
    S = sample_backward(wl, lam, 8, key=key, ell0=256, override=True)
    for ell in sorted(set(S.ell.tolist()) | {1024}):
        M[ell] = np.asarray(loynes_state(wl, key, ids, ell, lam, jnp.float64))
        M[ell // 2] = np.asarray(loynes_state(wl, key, ids, ell // 2, lam, jnp.float64))
    ells = sorted(M)
    for a, b in zip(ells[:-1], ells[1:], strict=True):
        assert np.all(M[b] >= M[a])  # Lemma 4.3: M_ell is non-decreasing in ell
    # Each sample equals M at its stopping horizon and at half of it (exact equality).
    for i in range(8):
        np.testing.assert_array_equal(S.W[i], M[int(S.ell[i])][i])
        np.testing.assert_array_equal(S.W[i], M[int(S.ell[i]) // 2][i])
    assert np.any(S.W != M[256])  # the rule did more than return the first horizon


def test_batching_does_not_change_samples():
    wl = five_class_exp()
    key = jax.random.key(9)
    # Algorithm 1 alone: sample i depends only on (key, i), not on the batch or its size
    # (64 samples: the kernel of the other tests of 64)
    a = sample_backward(wl, 1.3, 64, key=key, ell0=256, bias_control=None)
    b = sample_backward(
        wl, 1.3, 37, key=key, ell0=256, batching=Batching(max_batch=8), bias_control=None
    )
    np.testing.assert_array_equal(a.W[:37], b.W)
    np.testing.assert_array_equal(a.ell[:37], b.ell)
    # With the batch bias test the horizon depends on the samples drawn, not on the batching.
    c = sample_backward(wl, 1.3, 37, key=key, ell0=256)
    d = sample_backward(wl, 1.3, 37, key=key, ell0=256, batching=Batching(max_batch=8))
    np.testing.assert_array_equal(c.W, d.W)
    assert c.ell_batch == d.ell_batch and c.bias_bound == d.bias_bound


def test_cap_on_ell_reports_unconverged_and_throw_refuses():
    wl = five_class_exp()
    S = sample_backward(
        wl, 1.75, 64, key=jax.random.key(1), ell0=256, budget=Budget(max_ell=512), override=True
    )
    assert S.status == Status.unconverged and S.n_unconverged > 0
    with pytest.raises(EstimateError, match="status unconverged: .* samples hit max_ell"):
        palm_metrics(wl, S, throw=True)
    m = palm_metrics(wl, S)
    assert m["status"] == Status.unconverged and m["n_unconverged"] == S.n_unconverged
    assert m["wait_mean_ci"][1] == np.inf  # capped samples are lower bounds


def test_refuses_unstable_load_with_its_limit():
    wl = five_class_exp()
    with pytest.raises(UnstableLoadError, match="lambda_c") as err:
        sample_backward(wl, 1.9, 10, key=jax.random.key(0), limit=stability_limit(wl))
    lo, hi = err.value.lambda_c_ci
    assert lo <= err.value.lambda_c <= hi < float(wl.lambda_ideal())
    # the exact limit (QBD), to the rounding of its linear solve
    assert lo * (1 - 1e-12) <= FIVE_CLASS_EXP_LAMBDA_C <= hi * (1 + 1e-12)
    with pytest.raises(ValueError):
        sample_backward(wl, 2.2, 10, key=jax.random.key(0))  # beyond lambda_ideal


def test_work_within_needed_fast():
    # The fast version of the check below: at 0.8 lambda_c one of 256 samples needs 8192 jobs
    # and the others 2048, so running every sample to the longest horizon would do 3.95x the
    # work needed; the host loop, keeping only the unconverged samples, stays under 2x.
    S = sample_backward(five_class_exp(), 0.8 * 1.80, 256, key=jax.random.key(2), ell0=256)
    assert S.status == "ok"
    np.testing.assert_array_equal(np.unique(np.asarray(S.ell)), [2048, 8192])
    assert S.work_ratio < 2.0, S.work_ratio


@pytest.mark.slow
def test_work_within_needed_near_saturation():
    # (Slow: its horizons reach 2^16 jobs.) At 95% of lambda_c the host loop keeps only
    # unconverged samples: work done <= 1.5x needed.
    wl = five_class_exp()
    S = sample_backward(wl, 0.95 * 1.80, 256, key=jax.random.key(2), ell0=256, override=True)
    assert S.status == "ok"
    assert S.work_ratio < 1.5, S.work_ratio


def test_same_samples_on_four_host_devices(tmp_path):
    # The samples of _five_class_run: the first two horizons of all 1024 sharded over the 4
    # devices, the later doublings of the few still active on one device
    code = (
        "import jax, numpy as np;"
        "jax.config.update('jax_enable_x64', True);"
        "from jaxqueue.dist import Exponential; from jaxqueue.mjqm import Workload;"
        "from jaxqueue.mjqm.engines.recurrence._backward import sample_backward;"
        "assert jax.device_count() == 4, jax.devices();"
        "wl = Workload(20, [1, 2, 5, 10, 15], [0.5, 0.1, 0.2, 0.19, 0.01],"
        " [Exponential(m) for m in [0.5, 0.83, 1.25, 3.33, 10.0]]);"
        "S = sample_backward(wl, 1.2, 1024, key=jax.random.key(13), ell0=256);"
        f"np.save({str(tmp_path / 'w4.npy')!r}, S.W)"
    )
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4"
    env["PYTHONPATH"] = os.getcwd() + os.pathsep + env.get("PYTHONPATH", "")
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    W4 = np.load(tmp_path / "w4.npy")
    np.testing.assert_array_equal(W4, _five_class_run().W)


def test_numpy_reference_agrees_in_distribution():
    # The plain numpy Algorithm 1 (independent random numbers) and the JAX sampler estimate the
    # same M/M/3 mean wait (Erlang C) within their intervals (the JAX sampler on the sizes of
    # the M/M/3 case above: one compiled kernel).
    wl = MM_CASES[2][0]
    W, ell = sample_backward_numpy(
        3, [1], [1.0], lambda rng, c: rng.exponential(1.0, c.shape), 1.8, 512, seed=1, ell0=256
    )
    w = W[:, 0]
    exact = erlang_c_wait(3, 1.8, 1.0)
    hw = 2.576 * w.std(ddof=1) / math.sqrt(w.size)
    assert abs(w.mean() - exact) < hw, (w.mean(), exact, hw)
    S = sample_backward(wl, 1.8, 2048, key=jax.random.key(5), ell0=512)
    m = palm_metrics(wl, S, level=0.99)
    assert_within_ci(m["wait_mean"], *m["wait_mean_ci"], exact, what="M/M/3")


def test_samples_are_stationary_initial_states():
    # Run the queue forward from the samples (fresh inputs): the wait of the job arriving 300
    # jobs later has the same mean as at time 0 (two independent 99% intervals overlap).
    wl = five_class_exp()
    S = _five_class_run()
    lam = S.lam
    key2 = jax.random.key(60)

    def forward(W, i):
        x = draw_jobs(wl, lam, key2, i, jnp.arange(300), dtype=jnp.float64)

        def step(W, z):
            return mjsre_step(W, z[0], z[1], z[2]), None

        W, _ = jax.lax.scan(step, W, (x.alpha[:, 0], x.sigma, x.tau))
        return W

    W300 = np.asarray(jax.jit(jax.vmap(forward))(jnp.asarray(S.W), jnp.arange(S.n)))
    p = np.asarray(FIVE["probs"])
    idx = np.asarray(FIVE["cores"]) - 1
    a, b = S.W[:, idx] @ p, W300[:, idx] @ p
    se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    assert abs(a.mean() - b.mean()) < 2.576 * se, (a.mean(), b.mean(), se)


def test_density_integrates_to_one():
    wl = five_class_exp()
    S = _five_class_run()
    w = wait_samples(wl, S)
    bins = np.linspace(0, w.max() + 1, 60)
    dens, p0 = wait_density(wl, S, bins)
    np.testing.assert_allclose((dens * np.diff(bins)).sum(axis=1) + p0, 1.0, rtol=1e-12)


def _event_reference(lam, n_jobs, n_batches, seed):
    """Per-class mean waits and HOL-idle servers from the event-driven simulator (batch means)."""
    from tests.references import mjqm_events as sim

    rng = np.random.default_rng(seed)
    samplers = [sim.exp_sampler(m) for m in FIVE["means"]]
    cls, alpha, sigma, tau = sim.random_jobs(
        rng, n_jobs, FIVE["cores"], FIVE["probs"], samplers, lam
    )
    warm = n_jobs // 20
    out = sim.event_simulate(20, alpha, sigma, tau, warmup=warm)
    wait, c = out["wait"][warm:], cls[warm:]
    b = len(wait) // n_batches
    per_batch = np.array(
        [
            [wait[k * b : (k + 1) * b][c[k * b : (k + 1) * b] == j].mean() for j in range(5)]
            for k in range(n_batches)
        ]
    )
    return per_batch, out["hol_idle"]


def _compare_with_event_simulation(S, n_jobs, seed):
    wl = five_class_exp()
    lam = 1.2
    m = palm_metrics(wl, S, level=0.99)
    per_batch, hol = _event_reference(lam, n_jobs, 20, seed)
    ev = per_batch.mean(axis=0)
    ev_se = per_batch.std(axis=0, ddof=1) / math.sqrt(per_batch.shape[0])
    for j, c in enumerate(m["classes"]):
        se_b = (c["wait_mean_ci"][1] - c["wait_mean_ci"][0]) / (2 * 2.576)
        assert abs(c["wait_mean"] - ev[j]) < 3.29 * math.hypot(se_b, ev_se[j]), (j, c, ev[j])
    # HOL-idle servers, ERRATA item 1 (untruncated form) against the simulated time average.
    se_h = (m["hol_idle_servers_ci"][1] - m["hol_idle_servers_ci"][0]) / (2 * 2.576)
    assert abs(m["hol_idle_servers"] - hol) < 3.29 * se_h + 0.03 * hol, (m["hol_idle_servers"], hol)
    # Idle servers: s - lam E[alpha sigma] (exact).
    assert m["idle_servers"] == pytest.approx(float(wl.idle_servers_expected(lam)[0]))
    # The exact solver: the intervals cover the exact per-class waits and HOL waste (6
    # comparisons at 1 - 0.01 / 6 each, 1% family-wise).
    ex = FIVE_CLASS_EXP_EXACT[lam]
    mx = palm_metrics(wl, S, level=1 - 0.01 / 6)
    for j, c in enumerate(mx["classes"]):
        assert_within_ci(c["wait_mean"], *c["wait_mean_ci"], ex["wait_mean_class"][j], what=j)
    hol_ci = mx["hol_idle_servers_ci"]
    assert_within_ci(mx["hol_idle_servers"], *hol_ci, ex["hol_idle_servers"], what="HOL")


def test_five_class_matches_event_simulation_small():
    _compare_with_event_simulation(_five_class_run(), 200_000, 13)


@pytest.mark.slow
def test_five_class_matches_event_simulation_long():
    S = sample_backward(five_class_exp(), 1.2, 8192, key=jax.random.key(14), ell0=256)
    _compare_with_event_simulation(S, 3_000_000, 14)


def test_cli_sample_contract(capsys):
    import json

    from jaxqueue.cli import main

    argv = ["mjqm", "sample", "--scenario", "five-class-exp", "--lam", "1.0", "--samples", "64"]
    assert main([*argv, "--ell0", "256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["lam"] == 1.0 and len(out["classes"]) == 5
    for c in out["classes"]:
        for k in ("cores", "prob", "wait_mean", "wait_mean_ci", "wait_var", "wait_p90"):
            assert k in c
        assert c["wait_mean_ci"][0] <= c["wait_mean"] <= c["wait_mean_ci"][1]
    for k in ("wait_mean", "wait_mean_ci", "idle_servers", "hol_idle_servers"):
        assert k in out
    assert [c["cores"] for c in out["classes"]] == [1, 2, 5, 10, 15]
    assert out["status"] == "ok" and out["bias_bound"] >= 0 and out["ell_batch"] >= 256
    # Beyond lambda_c (but below lambda_ideal): refused with the estimate, exit status 1.
    assert main(["mjqm", "sample", "--scenario", "five-class-exp", "--lam", "1.95"]) == 1
    assert "lambda_c" in capsys.readouterr().err


@pytest.mark.slow
def test_palm_intervals_cover_exact_values_nominally():
    # The default suite: the same intervals (palm_metrics on backward samples) hold the same
    # M/M/1 mean wait and 90% quantile in test_mm1_md1_mmc_mean_wait_exact and
    # test_mm1_wait_quantile_exact.
    # 200 independent groups of 160 samples (sample i depends only on (key, i)): the 95%
    # intervals of the M/M/1 mean wait and 90% wait quantile cover the exact values in about
    # 95% of the groups (binomial sd 1.5 points; accept 90-99%). 32,000 samples: one call of
    # the kernel of the first two horizons (it takes at most 2^15).
    wl = Workload(1, [1], [1.0], [Exponential(1.0)])
    lam, groups, size = 0.6, 200, 160
    S = sample_backward(wl, lam, groups * size, key=jax.random.key(21), ell0=256)
    assert S.status == "ok"
    exact_mean, exact_q90 = lam / (1 - lam), math.log(lam / 0.1) / (1 - lam)
    cover_mean = cover_q90 = 0
    for g in range(groups):
        part = slice(g * size, (g + 1) * size)
        Sg = S.__class__(
            W=S.W[part],
            converged=S.converged[part],
            ell=S.ell[part],
            lam=S.lam,
            status=S.status,
            work_done=S.work_done,
            work_needed=S.work_needed,
            key=jax.random.fold_in(S.key, g),
        )
        m = palm_metrics(wl, Sg, level=0.95)
        lo, hi = m["wait_mean_ci"]
        cover_mean += lo <= exact_mean <= hi
        lo, hi = m["classes"][0]["wait_p90_ci"]
        cover_q90 += lo <= exact_q90 <= hi
    assert 0.90 <= cover_mean / groups <= 0.99, cover_mean
    assert 0.90 <= cover_q90 / groups <= 0.995, cover_q90


# ------------------------------------------------------------------ bias control (issue 14)
def _rare_big_class():
    """s = 8, one-core jobs and 1% eight-core jobs of mean 20: the per-sample rule of
    Algorithm 1 is fooled when the horizon holds no big job (issue 14)."""
    return Workload(8, [1, 8], [0.99, 0.01], [Exponential(1.0), Exponential(20.0)])


# ``jaxqueue.mjqm.exact`` at 0.85 lambda_c (checked by the slow test below): lambda_c, the mean
# wait of all jobs and per class.
RARE_LAMBDA_C = 2.936150105997755
RARE_EXACT = {0.85: (71.80864496390569, (71.78578030268072, 74.07224642517714))}


@functools.cache
def _rare_big_class_run(frac: float, n: int, seed: int):
    wl = _rare_big_class()
    lam = frac * RARE_LAMBDA_C
    return wl, lam, sample_backward(wl, lam, n, key=jax.random.key(seed))


@functools.cache
def _rare_big_class_alone():
    """Algorithm 1 alone at 0.85 lambda_c: the sizes of ``_rare_big_class_run(0.85, 500, 0)``
    (one compiled kernel)."""
    wl = _rare_big_class()
    lam = 0.85 * RARE_LAMBDA_C
    return sample_backward(wl, lam, 500, key=jax.random.key(0), ell0=256, bias_control=None)


def test_rare_big_class_bias_controlled_against_exact():
    # At 0.85 lambda_c the per-sample rule alone stops at 60% of the exact mean wait with a
    # narrow interval; the batch test doubles the horizon until the bias is bounded: the
    # interval (bias bound included) covers the exact value, or the status says why not.
    # 500 samples (1000 doubled the horizon once more, to 2^14, for three times the time).
    wl, lam, S = _rare_big_class_run(0.85, 500, 0)
    exact_w, exact_c = RARE_EXACT[0.85]
    old = palm_metrics(wl, _rare_big_class_alone(), level=0.999)
    # Algorithm 1 alone: far below the exact value, and (now) not called ok
    assert old["status"] == "biased" and old["wait_mean_ci"][1] < 0.8 * exact_w, old["wait_mean_ci"]
    m = palm_metrics(wl, S, level=0.999)
    assert m["ell_batch"] > 1024 and len(m["bias_tests"]) >= 2
    if m["status"] == "ok":
        assert_within_ci(m["wait_mean"], *m["wait_mean_ci"], exact_w, what="all")
        for c, row in enumerate(m["classes"]):
            assert_within_ci(row["wait_mean"], *row["wait_mean_ci"], exact_c[c], what=c)


@pytest.mark.slow
def test_rare_big_class_exact_values():
    from jaxqueue.mjqm import exact, exact_lambda_c

    wl = _rare_big_class()
    assert float(exact_lambda_c(wl)) == pytest.approx(RARE_LAMBDA_C, rel=1e-10)
    for frac, (w, wc) in RARE_EXACT.items():
        res = exact(wl, frac * RARE_LAMBDA_C)
        assert float(res.wait_mean) == pytest.approx(w, rel=1e-10)
        np.testing.assert_allclose(np.asarray(res.wait_mean_class), wc, rtol=1e-10)


def test_bias_bound_reported_and_folded_into_interval():
    wl, lam, S = _rare_big_class_run(0.85, 500, 0)  # the run of the test above
    assert S.status in ("ok", "biased") and S.bias_tests[-1].bound == S.bias_bound
    m = palm_metrics(wl, S)
    assert m["bias_bound"] == S.bias_bound > 0
    # The same samples without the bound: the upper ends are raised by the bias bound, the
    # lower ends untouched (the bias is one-sided).
    import equinox as eqx

    S_nb = eqx.tree_at(lambda x: (x.bias_bound, x.bias_bound_class), S, (0.0, None))
    m0 = palm_metrics(wl, S_nb)
    lo, hi = m["wait_mean_ci"]
    assert lo == m0["wait_mean_ci"][0] and hi == pytest.approx(m0["wait_mean_ci"][1] + S.bias_bound)
    r_hi, r0_hi = m["response_mean_ci"][1], m0["response_mean_ci"][1]
    assert r_hi == pytest.approx(r0_hi + S.bias_bound)
    for c, row in enumerate(m["classes"]):
        b = float(S.bias_bound_class[c])
        assert row["wait_mean_bias_bound"] == b >= 0
        lo0, hi0 = m0["classes"][c]["wait_mean_ci"]
        assert row["wait_mean_ci"][0] == lo0 and row["wait_mean_ci"][1] == pytest.approx(hi0 + b)
    # Each test of the batch bounds the increment M_2F - M_F: the tests that failed doubled F.
    tests = m["bias_tests"]
    ells = [t["ell"] for t in tests]  # F doubles, or jumps over horizons no sample stopped at
    steps = [b // a for a, b in zip(ells[:-1], ells[1:], strict=True)]
    assert all(k >= 2 and k & (k - 1) == 0 for k in steps)
    assert all(not t["ok"] for t in tests[:-1]) and tests[-1]["ok"] == (m["status"] == "ok")
    # The first test reads the Loynes increments M_2F - M_F, the later ones X(F) - X(F/2).
    assert [t["kind"] for t in tests] == ["loynes"] + ["paired"] * (len(tests) - 1)
    assert all(t["diff"] >= 0 for t in tests)
    # Algorithm 1 alone reports no bound.
    S0 = _rare_big_class_alone()
    assert S0.bias_bound == 0.0 and palm_metrics(wl, S0)["bias_bound"] == 0.0


def test_cli_sample_biased_status_warns(capsys):
    import json

    from jaxqueue.cli import main

    # A work budget that Algorithm 1 spends (its work without the bias control, same samples)
    # and a tolerance nothing meets: no room for a batch doubling, biased.
    wl, key = five_class_exp(), jax.random.key(0)
    S = sample_backward(wl, 1.5, 64, key=key, ell0=256, bias_control=None, dtype=jnp.float32)
    argv = ["mjqm", "sample", "--scenario", "five-class-exp", "--lam", "1.5", "--samples", "64"]
    argv += ["--ell0", "256", "--bias-tol", "1e-9", "--max-work", str(S.work_done), "--json"]
    assert main(argv) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert out["status"] == "biased" and out["bias_bound"] > 0 and out["ell_batch"] == 256
    warnings = [line for line in cap.err.splitlines() if line.startswith("warning")]
    assert len(warnings) == 1 and "biased" in warnings[0], cap.err


def test_work_budget_stops_algorithm1_unconverged():
    """``max_work`` bounds Algorithm 1 too: no doubling starts that would pass it (here none
    after the first two horizons), and the samples still doubling are unconverged, not ok.
    At 0.89 lambda_c the free run ends by 2^13 jobs (at 0.97 it went to 2^16)."""
    wl = five_class_exp()
    free = sample_backward(wl, 1.6, 64, key=jax.random.key(1), ell0=256, override=True)
    assert free.n_unconverged == 0 and free.work_done > 64 * 512
    S = sample_backward(
        wl, 1.6, 64, key=jax.random.key(1), ell0=256, override=True, budget=Budget(max_work=1)
    )
    assert S.status == Status.unconverged and S.n_unconverged > 0
    assert S.work_done < free.work_done and int(S.ell.max()) == 512


@pytest.mark.slow
def test_rare_big_class_bias_controlled_against_exact_long():
    wl, lam, S = _rare_big_class_run(0.85, 8192, 7)
    m = palm_metrics(wl, S, level=0.99)
    if m["status"] == "ok":
        assert_within_ci(m["wait_mean"], *m["wait_mean_ci"], RARE_EXACT[0.85][0], what="all")


def _time_budget_check(monkeypatch, wl, lam, pilot, exact_w, key, **kw):
    """``max_seconds``: the bias control runs on a pilot of ``_PILOT`` samples; the others are
    Algorithm 1 from the shortest tested horizon within the tolerance (``ell_more``), with
    independent keys. A budget of 0 keeps the pilot only; with room, all ``n_samples`` come
    back, the bias bound is the count-weighted mean of the two horizons' bounds, and the pooled
    estimate holds the exact value ``exact_w``. ``pilot``: a short ``_PILOT`` (the package's
    is 1000) keeps the test short."""
    from jaxqueue.mjqm.engines.recurrence import _backward
    from jaxqueue.mjqm.engines.recurrence._backward import _shortest_horizon

    monkeypatch.setattr(_backward, "_PILOT", pilot)
    _PILOT = _backward._PILOT
    S0 = sample_backward(wl, lam, 3 * _PILOT, key=key, budget=Budget(max_seconds=0.0), **kw)
    assert S0.n == _PILOT and S0.status == "ok" and S0.elapsed_s > 0
    S = sample_backward(wl, lam, 3 * _PILOT, key=key, budget=Budget(max_seconds=600.0), **kw)
    assert S.n == 3 * _PILOT and S.status == "ok"
    assert S.ell_batch == S0.ell_batch and S0.ell_more == 0
    assert [x.bound for x in S.bias_tests] == [x.bound for x in S0.bias_tests]
    H, B = _shortest_horizon(S0.bias_tests, 0.25)
    assert S.ell_more == H <= S.ell_batch
    assert S.bias_bound == pytest.approx((S0.bias_bound + 2 * B[0]) / 3)
    np.testing.assert_allclose(S.bias_bound_class, (S0.bias_bound_class + 2 * B[1:]) / 3)
    assert B[0] <= 0.25 * S0.bias_tests[-1].half_width
    np.testing.assert_array_equal(S.W[:_PILOT], S0.W)  # the pilot is the same
    assert np.all(S.ell[_PILOT:] >= 2 * H)  # the others start at ell_more
    # independent keys: no extra sample repeats a pilot sample (nonzero states are continuous)
    busy = S.W[:, -1] > 0
    pilot_rows = {tuple(r) for r in S.W[:_PILOT][busy[:_PILOT]]}
    assert not any(tuple(r) in pilot_rows for r in S.W[_PILOT:][busy[_PILOT:]])
    m = palm_metrics(wl, S, level=0.99)
    assert_within_ci(m["wait_mean"], *m["wait_mean_ci"], exact_w, what="all")


def test_time_budget_pilot_then_more_samples_at_its_horizon(monkeypatch):
    """The time budget's pilot and more samples on five-class-exp at 1.2 (a pilot of 64 from
    ``ell0 = 256``: the kernels of the tests above); the rare big class, where too short a
    horizon falls far below the exact value: the slow test below."""
    exact_w = FIVE_CLASS_EXP_EXACT[1.2]["wait_mean"]
    _time_budget_check(
        monkeypatch, five_class_exp(), 1.2, 64, exact_w, jax.random.key(11), ell0=256
    )


@pytest.mark.slow
def test_time_budget_pilot_then_more_samples_rare_big_class(monkeypatch):
    """As above on the rare big class at 0.85 lambda_c, a pilot of 256 samples."""
    lam = 0.85 * RARE_LAMBDA_C
    exact_w = RARE_EXACT[0.85][0]
    _time_budget_check(monkeypatch, _rare_big_class(), lam, 256, exact_w, jax.random.key(11))


def test_bias_test_all_zero_differences_rule_of_three():
    """No sample moved: the t bound would be 0 (se 0); the rule of three gives ``3 jump / n``
    with the previous test's mean nonzero jump, so an all-zero test is not a free pass."""
    from jaxqueue.mjqm.engines.recurrence._backward import _bias_test
    from jaxqueue.stats import t_quantile

    n = 500
    d_prev = np.zeros((n, 3))
    d_prev[:20] = [5.0, 4.0, 40.0]
    waits = np.random.default_rng(0).exponential(10.0, (n, 3))
    first = _bias_test(d_prev, waits, 256, "loynes", None, 0.95, 0.25)
    np.testing.assert_allclose(first.jump, [5.0, 4.0, 40.0])
    t = _bias_test(np.zeros((n, 3)), waits, 512, "paired", first, 0.95, 0.25)
    assert t.diff == 0.0 and t.diff_se == 0.0
    assert t.bound == pytest.approx(3 * 5.0 / n)
    np.testing.assert_allclose(t.bound_class, [3 * 4.0 / n, 3 * 40.0 / n])
    # three or more nonzero differences: the t bound alone
    d = np.zeros((n, 3))
    d[:3] = 1.0
    t3 = _bias_test(d, waits, 512, "paired", first, 0.95, 0.25)
    se = np.std(d[:, 0], ddof=1) / np.sqrt(n)
    assert t3.bound == pytest.approx(3 / n + t_quantile(n, 0.95) * se)


def test_shortest_horizon_walks_back_while_the_bound_allows():
    """``B(h / 2) = step(h) + B(h)`` over contiguous paired tests, stopping where the bound
    would pass ``tol`` times the passing test's half-width, at a Loynes test, or at a horizon
    the test jumped over."""
    from jaxqueue.mjqm.engines.recurrence._backward import BiasTest, _shortest_horizon

    def t(ell, kind, step, bound=0.0):
        z = np.zeros(1)
        return BiasTest(
            ell, kind, 0.0, 0.0, z, 10.0, bound, z + bound, True, None, np.array([step, 2 * step])
        )

    tests = [
        t(1024, "loynes", 9.0),
        t(2048, "paired", 5.0),
        t(4096, "paired", 1.0),
        t(8192, "paired", 0.5, bound=0.5),
    ]
    H, B = _shortest_horizon(tests, 0.25)  # 0.5 -> 1.0 (4096) -> 2.0 (2048) -> 7.0 > 2.5
    assert H == 2048 and B[0] == pytest.approx(2.0) and B[1] == pytest.approx(0.5 + 3.0)
    assert _shortest_horizon(tests, 1.0)[0] == 1024  # 7.0 <= 10; the Loynes test ends it
    assert _shortest_horizon(tests, 0.06)[0] == 8192  # 1.0 > 0.6: stays at the passing test
    jumped = [tests[0], t(8192, "paired", 0.1, bound=0.5)]  # 2048 and 4096 jumped over
    assert _shortest_horizon(jumped, 1.0)[0] == 4096


def test_backward_and_pile_refuse_a_policy_without_their_form():
    """The backward sampler runs FCFS only and pile growth FCFS or random assignment: any
    other policy is refused in one line, before anything runs."""
    from jaxqueue.mjqm import pile_growth
    from jaxqueue.mjqm.policies import FirstFit, RandomAssignment

    wl = Workload(4, [1, 2], [0.5, 0.5], [Exponential(1.0)] * 2)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="first-fit: no recurrence form"):
        sample_backward(wl, 0.5, 8, key=key, policy=FirstFit())
    with pytest.raises(ValueError, match="random-assignment has no backward form"):
        sample_backward(wl, 0.5, 8, key=key, policy=RandomAssignment())
    with pytest.raises(ValueError, match="first-fit: no recurrence form"):
        pile_growth(wl, key=key, policy=FirstFit())
