"""Forward MJSRE simulation against closed forms, the event-driven simulator and the exact
solver (``jaxqueue.mjqm.exact``; more in ``tests/mjqm/test_vs_exact.py``)."""

import dataclasses
import io
import json
import math
import os
import subprocess
import sys
import textwrap
from contextlib import redirect_stdout
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from jaxqueue import scenarios
from jaxqueue.dist import Deterministic, Exponential
from jaxqueue.mjqm import Workload, simulate, simulate_steady
from jaxqueue.mjqm._inputs import draw_jobs  # the same jobs as the simulation draws
from jaxqueue.mjqm.options import Execution, InitialState
from tests.helpers import assert_close, assert_within_ci
from tests.references.mjqm_events import bpareto_sampler, event_simulate, exp_sampler, random_jobs
from tests.references.mjqm_exact_values import FIVE_CLASS_EXP_EXACT, FIVE_CLASS_EXP_LAMBDA_C

ROOT = Path(__file__).resolve().parents[2]


def erlang_c_wait(c, lam, mu):
    """Mean waiting time of the M/M/c queue (Erlang C formula)."""
    a = lam / mu
    top = a**c / math.factorial(c) * c / (c - a)
    p_wait = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
    return p_wait / (c * mu - lam)


# ------------------------------------------------------------------ closed forms
@pytest.mark.parametrize(
    "law, exact, size",
    [
        # M/M/1, rho = 1/2: rho / (mu - lam). The sizes of the M/M/1 runs of the stationarity
        # tests below: one compiled kernel
        (Exponential(1.0), 1.0, dict(n_jobs=2000)),
        # M/D/1: rho / (2 mu (1 - rho)). Slow: a law other than the exponential is checked job
        # by job in test_same_jobs_as_event_simulator[five-class-bpareto]
        pytest.param(
            Deterministic(1.0), 0.5, dict(n_jobs=20_000, dtype=jnp.float64), marks=pytest.mark.slow
        ),
    ],
)
def test_single_server_lindley(law, exact, size):
    w = Workload(1, [1], [1.0], [law])
    r = simulate(w, 0.5, key=jax.random.key(11), n_replications=64, level=0.99, **size)
    assert_within_ci(r.wait_mean[0], *r.wait_mean_ci[0], exact, what="mean wait")
    # one server: idle = 1 - rho, no HOL blocking
    assert_within_ci(r.idle_servers, *r.idle_servers_ci, 0.5, what="idle servers")
    assert r.hol_idle_servers == 0.0
    if isinstance(law, Exponential):
        # P(W > x) = rho exp(-(mu - lam) x): p90 = 2 ln 5; tolerance one histogram bin
        q = r.wait_quantile(0.9)
        assert abs(q - 2 * math.log(5)) <= 2 * math.log(5) / 16
        assert abs(r.wait_var[0] - 3.0) < 0.1 * 3.0  # Var W = rho (2 - rho) / (mu - lam)^2


MM3 = Workload(3, [1], [1.0], [Exponential(1.0)])
MM3_KW = dict(key=jax.random.key(5), n_jobs=10_000, n_replications=128, dtype=jnp.float64)


@pytest.fixture(scope="module")
def mm3():
    """M/M/3 at rho = 2/3, 95% intervals: the run of test_one_core_jobs_are_mmc and
    test_idle_control_variate_on_mmc."""
    return simulate(MM3, 2.0, **MM3_KW)


def test_one_core_jobs_are_mmc(mm3):
    r = mm3
    assert_within_ci(r.wait_mean[0], *r.wait_mean_ci[0], erlang_c_wait(3, 2.0, 1.0), what="W")
    assert_within_ci(r.idle_servers, *r.idle_servers_ci, 1.0, what="idle = s - lam E[sigma]")
    assert r.hol_idle_servers == 0.0
    # Little: L = lam (E[W] + E[sigma])
    L = 2.0 * (erlang_c_wait(3, 2.0, 1.0) + 1.0)
    assert_within_ci(r.number_in_system, *r.number_in_system_ci, L, what="L")


# ------------------------------------------------------------------ the event simulator
@pytest.mark.parametrize(
    "name", [pytest.param("five-class-exp", marks=pytest.mark.slow), "five-class-bpareto"]
)
def test_same_jobs_as_event_simulator(name):
    """Job by job: the MJSRE waits equal the event simulator's on the same inputs; waste agrees
    up to the reservations still pending at the end (bounded by sum(W_n)). The default suite:
    five-class-bpareto (the same kernel as five-class-exp, with a heavier law)."""
    wl = scenarios.get(name)
    n, key = 4000, jax.random.key(5)
    draw = jax.jit(draw_jobs, static_argnames=("dtype",))
    for lam in (1.0, 1.5):
        r = simulate(wl, lam, key=key, n_jobs=n, n_replications=2, warmup=0, dtype=jnp.float64)
        sums = np.zeros(wl.n_classes)
        counts = np.zeros(wl.n_classes)
        idle = hol = time = 0.0
        for rep in range(2):
            inp = draw(wl, lam, key, rep, jnp.arange(n), dtype=jnp.float64)
            cls = np.asarray(inp.cls)
            ev = event_simulate(20, np.asarray(inp.alpha)[:, 0], inp.sigma, inp.tau)
            np.add.at(sums, cls, ev["wait"])
            np.add.at(counts, cls, 1)
            idle += ev["idle"] * ev["time"]
            hol += ev["hol_idle"] * ev["time"]
            time += ev["time"]
        assert_close(r.counts, counts)
        assert_close(r.wait_mean, sums / counts, rtol=1e-9, what=f"{name} lam={lam}")
        pending = float(np.sum(r.final_state)) / time  # reservations beyond the window
        assert abs(r.idle_servers - idle / time) <= pending + 1e-9
        assert abs(r.hol_idle_servers - hol / time) <= pending + 1e-9
        assert r.hol_idle_servers > 0


def _event_estimates(wl, samplers, lam, n_rep, n_jobs, seed):
    rng = np.random.default_rng(seed)
    cores = np.asarray(wl.cores)[:, 0]
    probs = np.asarray(wl.probs)
    per_rep = []
    for _ in range(n_rep):
        cls, alpha, sigma, tau = random_jobs(rng, n_jobs, cores, probs, samplers, lam)
        warm = n_jobs // 10
        ev = event_simulate(wl.servers[0], alpha, sigma, tau, warmup=warm)
        c = cls[warm:]
        w = ev["wait"][warm:]
        per_rep.append(
            [np.mean(w[c == k]) for k in range(len(probs))] + [ev["idle"], ev["hol_idle"]]
        )
    return np.asarray(per_rep)


def _agree(r, ev, level):
    """Two independent estimates agree: |difference| within the combined t interval."""
    m_ev = ev.mean(axis=0)
    se_ev = ev.std(axis=0, ddof=1) / np.sqrt(ev.shape[0])
    q_ev = scipy.stats.t.ppf(0.5 + level / 2, ev.shape[0] - 1)
    mj = np.concatenate([r.wait_mean, [r.idle_servers, r.hol_idle_servers]])
    ci = np.concatenate([r.wait_mean_ci, [r.idle_servers_ci, r.hol_idle_servers_ci]])
    half_mj = (ci[:, 1] - ci[:, 0]) / 2
    tol = np.hypot(half_mj, q_ev * se_ev)
    assert np.all(np.abs(mj - m_ev) <= tol), (mj, m_ev, tol)


def _covers_exact(r, lam):
    """The intervals of ``r`` (five-class-exp at ``lam``) cover the exact per-class mean waits
    and HOL-idle servers (``tests/references/mjqm_exact_values.py``, from
    ``jaxqueue.mjqm.exact``)."""
    ex = FIVE_CLASS_EXP_EXACT[lam]
    lo, hi = r.wait_mean_ci[:, 0], r.wait_mean_ci[:, 1]
    assert_within_ci(r.wait_mean, lo, hi, ex["wait_mean_class"], what=f"W vs exact, lam={lam}")
    assert_within_ci(
        r.hol_idle_servers, *r.hol_idle_servers_ci, ex["hol_idle_servers"], what="HOL vs exact"
    )


# 5,000 jobs in the default suite (the forward kernel is five_f32's below: n_jobs is traced)
@pytest.mark.parametrize("n_jobs", [5_000, pytest.param(20_000, marks=pytest.mark.slow)])
def test_five_class_independent_event_simulation(n_jobs):
    """Independent random numbers (numpy) in the event simulator, and the exact solver; 99.8%
    intervals per quantity (about 2.5% family-wise over the 7 + 6 comparisons), each from
    its own run."""
    wl = scenarios.get("five-class-exp")
    samplers = [exp_sampler(float(m)) for m in wl.mean_service()]
    ev = _event_estimates(wl, samplers, 1.0, n_rep=8, n_jobs=n_jobs, seed=3)
    r = simulate(
        wl,
        1.0,
        key=jax.random.key(3),
        n_jobs=n_jobs,
        n_replications=64,
        level=0.998,
        override=True,
    )
    assert r.status == "ok"
    _agree(r, ev, 0.998)
    _covers_exact(r, 1.0)
    # waste: mean idle servers = s - lam E[alpha sigma] (ERRATA item 1)
    assert_within_ci(r.idle_servers, *r.idle_servers_ci, r.idle_servers_expected, what="idle")


@pytest.mark.slow
@pytest.mark.parametrize("law", ["exp", "bpareto"])
@pytest.mark.parametrize("lam", [1.0, 1.5])
def test_five_class_independent_event_simulation_long(law, lam):
    wl = scenarios.get(f"five-class-{law}")
    if law == "exp":
        samplers = [exp_sampler(float(m)) for m in wl.mean_service()]
    else:
        samplers = [
            bpareto_sampler(float(s.xmin), float(s.xmax), float(s.shape)) for s in wl.services
        ]
    ev = _event_estimates(wl, samplers, lam, n_rep=30, n_jobs=100_000, seed=4)
    r = simulate(wl, lam, key=jax.random.key(4), n_jobs=100_000, n_replications=256, level=0.998)
    _agree(r, ev, 0.998)
    if law == "exp":
        _covers_exact(r, lam)
    assert_within_ci(r.idle_servers, *r.idle_servers_ci, r.idle_servers_expected, what="idle")


# ------------------------------------------------------------------ invariances
def _fields(r):
    return (r.counts, r.wait_mean, r.wait_var, r.idle_servers, r.hol_idle_servers, r.hist)


# five-class-exp at 1.5, 3000 jobs x 64 float32 replications: one compiled kernel for the
# chunking, four-device and CLI tests and simulate_steady's first round (3000 jobs, warm-up
# 300) in test_simulate_steady_backward_start_covers_exact
CHUNK_KW = dict(key=jax.random.key(7), n_replications=64, dtype=jnp.float32, override=True)


@pytest.fixture(scope="module")
def five_f32():
    return simulate(scenarios.get("five-class-exp"), 1.5, n_jobs=3000, **CHUNK_KW)


def _same_any_chunking(ref, chunks):
    wl = scenarios.get("five-class-exp")
    for chunk in chunks:
        b = simulate(wl, 1.5, n_jobs=ref.n_jobs, execution=Execution(chunk=chunk), **CHUNK_KW)
        np.testing.assert_array_equal(ref.final_state, b.final_state)
        np.testing.assert_array_equal(ref.hist, b.hist)
        for x, y in zip(_fields(ref), _fields(b), strict=True):
            assert_close(x, y, rtol=1e-6)


def test_chunking_float32_and_continuation(five_f32):
    """Same key, any chunking: bitwise the same trajectories, waits and histograms; the
    float64 statistics differ only by the float32 rounding of within-chunk HOL sums. Odd
    blocks (chunk 75) run their last job apart from the loop over pairs of jobs (chunks 70,
    3 and 2: the slow test below)."""
    wl = scenarios.get("five-class-exp")
    a = five_f32
    _same_any_chunking(a, (75,))
    assert a.final_state.dtype == np.float32
    # warm start: 1500 + 1500 jobs reproduce the 3000-job trajectory
    half = dict(n_jobs=1500, warmup=0, **CHUNK_KW)
    first = simulate(wl, 1.5, **half)
    rest = simulate(wl, 1.5, init=InitialState(first.final_state, job_offset=1500), **half)
    np.testing.assert_array_equal(rest.final_state, a.final_state)


@pytest.mark.slow
def test_chunking_even_blocks_with_a_remainder_and_three_job_blocks(five_f32):
    """Chunks 70 (even blocks, a shorter last one), 3 (an odd block, one job per step) and 2
    (blocks of 2 jobs, one job per step); the default suite's
    test_chunking_float32_and_continuation checks chunk 75."""
    _same_any_chunking(five_f32, (70, 3, 2))


def _every_field(r):
    """Every field of a result but the workload, floats as their bytes (bit for bit)."""
    out = {}
    for f in dataclasses.fields(r):
        v = getattr(r, f.name)
        if f.name != "workload":
            out[f.name] = v.tobytes() if isinstance(v, np.ndarray) else np.asarray(v).tobytes()
    return out


def test_same_numbers_on_four_host_devices(five_f32, tmp_path):
    """The run of ``five_f32`` with its replications on 4 host devices (a subprocess) gives
    the numbers of the one device of this process."""
    saved = tmp_path / "four.npz"
    code = textwrap.dedent(
        f"""
        import jax, jax.numpy as jnp, numpy as np
        jax.config.update("jax_enable_x64", True)  # as in the tests: float64 sums
        from jaxqueue import scenarios
        from jaxqueue.mjqm import simulate
        assert len(jax.devices()) == 4
        wl = scenarios.get("five-class-exp")
        kw = dict(key=jax.random.key(7), n_replications=64, dtype=jnp.float32, override=True)
        a = simulate(wl, 1.5, n_jobs=3000, **kw)
        assert a.device == "cpu x4", a.device
        np.savez({str(saved)!r}, final_state=a.final_state, wait_mean=a.wait_mean, hist=a.hist)
        print("ok")
        """
    )
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")
    four, one = np.load(saved), five_f32
    assert one.device == "cpu x1", one.device
    np.testing.assert_array_equal(four["final_state"], one.final_state)
    np.testing.assert_allclose(four["wait_mean"], one.wait_mean, rtol=1e-12)
    np.testing.assert_array_equal(four["hist"], one.hist)


# ------------------------------------------------------------------ variants
def test_random_assignment_one_core_is_independent_mm1():
    from jaxqueue.mjqm.policies import RandomAssignment

    """RA with one-core jobs: each server is an M/M/1 queue with rate lam / s."""
    w = Workload(2, [1], [1.0], [Exponential(1.0)])
    r = simulate(
        w,
        1.0,
        key=jax.random.key(13),
        n_jobs=20_000,
        n_replications=64,
        policy=RandomAssignment(),
        dtype=jnp.float64,
        level=0.99,
    )
    assert_within_ci(r.wait_mean[0], *r.wait_mean_ci[0], 1.0, what="RA wait")


@pytest.mark.slow
def test_multi_resource_and_specific_run():
    w = Workload(
        [4, 2], [[1, 0], [2, 1], [0, 2]], [0.5, 0.3, 0.2], [Exponential(1.0)] * 3, name="mr"
    )
    r = simulate(w, 0.8, key=jax.random.key(1), n_jobs=4000, n_replications=8)
    # idle servers of each type = s_t - lam E[alpha_t sigma]
    expected = np.asarray(w.idle_servers_expected(0.8))
    assert np.all(np.abs(r.idle_servers_by_type - expected) < 0.1 * np.asarray(w.servers))
    ws = Workload(6, [1, 2], [0.5, 0.5], [Exponential(1.0)] * 2, specific=[1, 0])
    rs = simulate(ws, 1.0, key=jax.random.key(1), n_jobs=4000, n_replications=8)
    assert np.all(np.isfinite(rs.wait_mean)) and rs.hol_idle_servers > 0


# ------------------------------------------------------------------ errors and CLI
def test_bad_inputs_fail_clearly():
    wl = scenarios.get("five-class-exp")
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="stability limit"):
        simulate(wl, 2.2, key=key, n_jobs=100, n_replications=2)
    with pytest.raises(ValueError, match="lam"):
        simulate(wl, -1.0, key=key, n_jobs=100, n_replications=2)
    with pytest.raises(ValueError, match="n_replications"):
        simulate(wl, 1.0, key=key, n_jobs=100, n_replications=1)
    with pytest.raises(ValueError, match="init"):
        simulate(wl, 1.0, key=key, n_jobs=100, n_replications=2, init=InitialState(np.zeros(3)))
    with pytest.raises(ValueError, match="variant"):
        simulate(wl, 1.0, key=key, n_jobs=100, n_replications=2, variant="lifo")
    with pytest.raises(ValueError, match="histogram must be a jaxqueue.mjqm.options.Histogram"):
        simulate(wl, 1.0, key=key, n_jobs=100, n_replications=2, histogram=16)
    with pytest.raises(ValueError, match="warmup"):
        simulate(wl, 1.0, key=key, n_jobs=100, n_replications=2, warmup=100)


def test_cli_simulate_json():
    from jaxqueue.cli import main

    # the sizes of ``five_f32``; the backward start's 64 samples those of
    # test_simulate_steady_backward_start_covers_exact: the same compiled kernels
    buf = io.StringIO()
    argv = ["mjqm", "simulate", "--scenario", "five-class-exp", "--lam", "1.5", "--jobs", "3000"]
    with redirect_stdout(buf):
        rc = main([*argv, "--replications", "64", "--json", "--seed", "7"])
    assert rc == 0
    out = json.loads(buf.getvalue())
    assert out["lam"] == 1.5
    assert [c["cores"] for c in out["classes"]] == [1, 2, 5, 10, 15]
    for c in out["classes"]:
        assert c["wait_mean_ci"][0] <= c["wait_mean"] <= c["wait_mean_ci"][1]
        assert {"prob", "wait_var", "wait_p90"} <= set(c)
    for k in ("wait_mean", "wait_mean_ci", "idle_servers", "hol_idle_servers"):
        assert k in out
    with redirect_stdout(io.StringIO()):
        assert main([*argv[:-4], "--lam", "5"]) == 1


# ------------------------------------------------------------------ stationarity (issue 14)
def test_idle_identity_flags_a_start_far_above_the_stationary_law():
    """M/M/1 at rho = 1/2 started with 400 time units of work (about 400 jobs to drain, half
    of them after the warm-up of 200): the mean wait falls along the run, which the one-sided
    drift test cannot see; the workload shrinks, so the measured idle servers fall short of
    s - lam E[sigma] (the identity's z-score)."""
    wl = Workload(1, [1], [1.0], [Exponential(1.0)])
    # the sizes of the M/M/1 runs of test_single_server_lindley (warm-up 200 with the start
    # too): one compiled kernel
    run = dict(key=jax.random.key(5), n_jobs=2000, n_replications=64, dtype=jnp.float32)
    bad = simulate(wl, 0.5, init=InitialState(np.full(1, 400.0)), warmup=200, **run)
    assert bad.wait_growth < 0 and bad.idle_z < -3.29
    assert bad.status == "nonstationary"
    good = simulate(wl, 0.5, **run)
    assert good.status == "ok" and abs(good.idle_z) < 3.29


@pytest.mark.slow
def test_too_few_replications_are_unconverged_and_not_extended():
    """Fewer than MIN_REPLICATIONS replications: the interval of heavy-tailed replications is
    too short (90% coverage with 32 on a rare-class workload, bench_coverage), so the status is
    unconverged, and simulate_steady does not spend its budget on more jobs (they do not
    mend it); the same run with MIN_REPLICATIONS replications is ok. The default suite:
    ``tests/stats/test_results.py::test_simulate_steady_throw`` (the run of ``few``, with these
    checks) and ``test_forward_too_few_replications_throw_and_ok_does_not`` (MIN_REPLICATIONS
    replications are ok)."""
    from jaxqueue.mjqm._estimators import MIN_REPLICATIONS

    wl = Workload(2, [1], [1.0], [Exponential(1.0)])
    few = simulate_steady(wl, 1.0, key=jax.random.key(5), n_jobs=2000, n_replications=32)
    assert few.status == "unconverged" and len(few.rounds) == 1
    assert abs(few.idle_z) < 3.29 and abs(few.wait_growth) < 0.5  # stationary, just few
    enough = simulate_steady(
        wl, 1.0, key=jax.random.key(5), n_jobs=2000, n_replications=MIN_REPLICATIONS
    )
    assert enough.status == "ok"


def test_idle_identity_flags_a_short_run_from_empty_near_saturation():
    """M/M/1 at rho = 0.98 (mean wait 49), 2000 jobs from empty after the default warm-up of
    200 (the first round of simulate_steady below: one compiled kernel): the workload is still
    growing; before the identity check this said ok with a mean wait far below 49."""
    wl = Workload(1, [1], [1.0], [Exponential(1.0)])
    r = simulate(wl, 0.98, key=jax.random.key(6), n_jobs=2000, n_replications=64)
    assert r.wait_mean_all_ci[1] < 49.0  # the interval misses the exact value ...
    assert r.status == "nonstationary"  # ... and the status says why not to trust it


def test_simulate_steady_backward_start_covers_exact():
    """From backward samples, one round of five-class-exp at 0.8 lambda_c is ok and its
    interval holds the exact mean wait (``tests/references/mjqm_exact_values.py``)."""
    from jaxqueue.mjqm import simulate_steady

    lam = 0.8 * FIVE_CLASS_EXP_LAMBDA_C
    want = FIVE_CLASS_EXP_EXACT[lam]["wait_mean"]
    wl = scenarios.get("five-class-exp")
    r = simulate_steady(wl, lam, key=jax.random.key(3), n_jobs=3000, n_replications=64)
    assert r.start == "backward" and r.status == "ok" and len(r.rounds) >= 1
    assert_within_ci(r.wait_mean_all, *r.wait_mean_all_ci, want, what="mean wait")


@pytest.mark.slow
def test_simulate_steady_two_class_256_covers_exact():
    """Issue 14's example: two-class-256 at 0.7 lambda_c (exact mean wait 84.46) gave
    'nonstationary' from an empty start. From backward samples one round of 5000 jobs is ok
    and its interval holds the exact value (the fixed key; one of the checks of the coverage
    study in benchmarks/). The default suite: test_simulate_steady_backward_start_covers_exact."""
    from jaxqueue.mjqm import exact, exact_lambda_c, simulate_steady

    wl = scenarios.get("two-class-256")
    lam = 0.7 * float(exact_lambda_c(wl))
    want = float(exact(wl, lam).wait_mean)
    r = simulate_steady(wl, lam, key=jax.random.key(3), n_jobs=5000, n_replications=128)
    assert r.start == "backward" and r.status == "ok" and len(r.rounds) >= 1
    assert_within_ci(r.wait_mean_all, *r.wait_mean_all_ci, want, what="mean wait")


def _steady_extends_then_reports_nonstationary(rho):
    from jaxqueue.mjqm import simulate_steady

    wl = Workload(1, [1], [1.0], [Exponential(1.0)])
    run = dict(key=jax.random.key(8), n_jobs=2000, n_replications=64, start="empty")
    short = simulate_steady(wl, rho, max_seconds=1e-3, **run)
    assert short.status == "nonstationary" and len(short.rounds) == 1
    long = simulate_steady(wl, rho, max_seconds=3600, **run)  # a budget no loaded machine reaches
    assert long.status == "ok" and len(long.rounds) > 1
    assert [r[0] for r in long.rounds] == [2000 * 2**k for k in range(len(long.rounds))]
    want = rho / (1 - rho)
    assert_within_ci(long.wait_mean_all, *long.wait_mean_all_ci, want, what="M/M/1 wait")


def test_simulate_steady_extends_then_reports_nonstationary():
    """M/M/1 at rho = 0.9 from empty with a budget that allows no second round: the
    status stays nonstationary; with room, the run is doubled until the checks pass (rho =
    0.98, where it doubles five times or more: the slow test below)."""
    _steady_extends_then_reports_nonstationary(0.9)


@pytest.mark.slow
def test_simulate_steady_extends_then_reports_nonstationary_near_saturation():
    """As above at rho = 0.98 (mean wait 49): five or more doublings."""
    _steady_extends_then_reports_nonstationary(0.98)


def test_cli_simulate_strict_exit_status(capsys):
    """A non-ok estimate: one warning line on stderr; --strict turns it into exit status 3."""
    from jaxqueue.cli import main

    # the sizes of ``five_f32`` (float32, the CLI's default): one compiled kernel
    argv = ["mjqm", "simulate", "--scenario", "five-class-exp", "--lam", "1.75", "--jobs", "3000"]
    argv += ["--replications", "64", "--start", "empty", "--max-seconds", "0.001", "--json"]
    assert main(argv) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert out["status"] == "nonstationary" and "status_reason" in out
    warnings = [line for line in cap.err.splitlines() if line.startswith("warning")]
    assert len(warnings) == 1 and "nonstationary" in warnings[0]
    assert main([*argv, "--strict"]) == 3


def test_progress_tells_the_fraction_done_and_changes_no_number(mm3):
    """With ``progress`` the run goes in 20 calls of 2 blocks: 1,000 warm-up jobs are 4
    blocks (3 x 256 + 232), 9,000 measured jobs 36 (35 x 256 + 40); every field equals that
    of the run in one call (``mm3``) bit for bit."""
    told = []
    b = simulate(MM3, 2.0, progress=told.append, **MM3_KW)
    assert told == [f"{k}/40 blocks of 256 jobs ({k / 40:.0%})" for k in range(2, 41, 2)]
    assert told[0] == "2/40 blocks of 256 jobs (5%)"
    assert _every_field(b) == _every_field(mm3)


def test_cli_progress_line_tells_the_fraction_done_and_leaves_stdout_alone(
    tmp_path, monkeypatch, capsys
):
    """``mjqm simulate`` with its live line (forced: stderr is not a terminal here) tells the
    fraction done of each round on stderr; stdout's JSON equals that of the ``-q`` run (no
    bar, the run in one call) but for the seconds. The sizes of ``mm3`` (the same compiled
    programs as the tests above); one round (``--max-seconds`` leaves no time for another)."""
    from jaxqueue.cli import main

    path = tmp_path / "mm3.toml"
    path.write_text(
        'servers = 3\n[[classes]]\ncores = 1\nprob = 1.0\nlaw = "exponential"\nmean = 1.0\n'
    )
    monkeypatch.setenv("JAXQUEUE_PROGRESS", "1")
    argv = ["mjqm", "simulate", "--scenario", str(path), "--lam", "2", "--jobs", "10000"]
    argv += ["--replications", "128", "--dtype", "float64", "--start", "empty"]
    argv += ["--max-seconds", "0.001", "--json"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "round 1: 2/40 blocks of 256 jobs (5%)" in err
    assert "round 1: 40/40 blocks of 256 jobs (100%)" in err
    assert "blocks of" not in out
    assert main([*argv, "-q"]) == 0
    quiet, err = capsys.readouterr()
    assert "blocks of" not in err

    def numbers(text):
        o = json.loads(text)
        o["rounds"] = [r[:3] for r in o["rounds"]]  # (jobs, warm-up, status, seconds)
        return {k: v for k, v in o.items() if k != "elapsed_s"}

    assert numbers(out) == numbers(quiet)


def test_idle_control_variate_on_mmc(mm3, monkeypatch):
    """End to end on M/M/3 at rho = 2/3 (Erlang C), the same 128 replications with and without
    the control: the corrected estimate holds the exact wait and its interval is narrower."""
    import jaxqueue.mjqm.engines.recurrence._forward_result as fwd

    want = erlang_c_wait(3, 2.0, 1.0)
    r = mm3
    assert_within_ci(r.wait_mean[0], *r.wait_mean_ci[0], want, what="W")
    monkeypatch.setattr(fwd, "MIN_CONTROL_REPS", 10**9)
    plain = simulate(MM3, 2.0, **MM3_KW)
    assert_within_ci(plain.wait_mean[0], *plain.wait_mean_ci[0], want, what="W plain")
    width = np.diff(r.wait_mean_ci[0])[0] / np.diff(plain.wait_mean_ci[0])[0]
    assert width < 0.9, width
