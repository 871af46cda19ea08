"""mjqm.sensitivity: derivatives with intervals against the exact QBD's derivatives (and
those against central differences of mjqm.exact), the measure-valued derivative for the logits
(overall and per class, and its coupling horizon), CRN differences of an event policy against
the independent heapq simulator, the CLI keys."""

from __future__ import annotations

import functools
import json

import jax
import numpy as np
import pytest

from jaxqueue.cli import main
from jaxqueue.dist import Exponential
from jaxqueue.mjqm import Workload, exact, exact_lambda_c, exact_sensitivity, sensitivity
from jaxqueue.mjqm.options import Coupling

MEANS = (1.0, 2.0)
PROBS = (0.6, 0.4)


def small(means=MEANS, probs=PROBS) -> Workload:
    return Workload(4, [1, 2], list(probs), [Exponential(m) for m in means])


def _lam(load=0.6):
    return load * float(exact_lambda_c(small()))


@functools.cache
def _exact_sens(load=0.6, metric="wait_mean"):
    """``exact_sensitivity`` of ``small()`` at ``_lam(load)``: one solve and its derivatives,
    shared by the tests of this module (read only)."""
    return exact_sensitivity(small(), _lam(load), metric)


def _exact_fd(metric, lam, h=1e-5):
    """Central differences of mjqm.exact on rebuilt workloads (no grad involved)."""

    def f(lam_, means, probs):
        r = exact(small(tuple(means), tuple(probs)), lam_)
        w = float(r.wait_mean)
        return w + float(np.dot(probs, means)) if metric == "response_mean" else w

    means, p = np.asarray(MEANS), np.asarray(PROBS)
    d_lam = (f(lam + h, means, p) - f(lam - h, means, p)) / (2 * h)
    d_scale = [
        (f(lam, means * (1 + h * e), p) - f(lam, means * (1 - h * e), p)) / (2 * h)
        for e in np.eye(2)
    ]
    d_logit = []
    for e in np.eye(2):
        up, dn = p * np.exp(h * e), p * np.exp(-h * e)
        d_logit.append((f(lam, means, up / up.sum()) - f(lam, means, dn / dn.sum())) / (2 * h))
    return d_lam, np.asarray(d_scale), np.asarray(d_logit)


def test_exact_derivatives_agree_with_central_differences():
    lam = _lam()
    ex = _exact_sens()
    d_lam, d_scale, d_logit = _exact_fd("wait_mean", lam)
    np.testing.assert_allclose(ex["lam"], d_lam, rtol=1e-5)
    np.testing.assert_allclose(ex["scale"], d_scale, rtol=1e-5)
    np.testing.assert_allclose(ex["logits"], d_logit, rtol=1e-5, atol=1e-8)
    assert ex["value"] == pytest.approx(float(exact(small(), lam).wait_mean), rel=1e-12)


def _covers(res, ex, names):
    for name in names:
        e = res.derivatives[name]
        lo, hi = np.asarray(e.low), np.asarray(e.high)
        assert np.all((lo <= ex[name]) & (ex[name] <= hi)), (name, e, ex[name])


def _exact_class_fd(lam, h=1e-5):
    """``(C, C)`` [class, logit]: central differences of mjqm.exact's per-class mean waits
    with respect to the logits."""
    p = np.asarray(PROBS)
    cols = []
    for e in np.eye(2):
        up, dn = p * np.exp(h * e), p * np.exp(-h * e)
        w = [
            np.asarray(exact(small(probs=tuple(x / x.sum())), lam).wait_mean_class)
            for x in (up, dn)
        ]
        cols.append((w[0] - w[1]) / (2 * h))
    return np.stack(cols, axis=1)


def test_pathwise_and_measure_valued_cover_the_exact_derivatives():
    """At the 99.9% level (a fixed key: the 95% coverage rate is the benchmark's); the
    per-class logits derivatives against central differences of the exact per-class waits."""
    lam = _lam()
    res = sensitivity(
        small(), lam, key=jax.random.key(3), n_jobs=2000, n_replications=16, level=0.999
    )
    assert res.methods == {"lam": "pathwise", "scale": "pathwise", "logits": "measure-valued"}
    ex = _exact_sens()
    _covers(res, ex, ("lam", "scale", "logits"))
    assert res.value.low <= ex["value"] <= res.value.high
    e, d = res.derivatives_class["logits"], _exact_class_fd(lam)
    assert np.all((np.asarray(e.low) <= d) & (d <= np.asarray(e.high))), (e, d)
    # 16 replications: fewer than the MJQM's rule asks for an ok
    assert res.status == "unconverged" and "replications" in res.status_reason()


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["wait_mean", "response_mean"])
def test_long_run_covers_the_exact_derivatives(metric):
    lam = _lam(0.8)
    res = sensitivity(
        small(),
        lam,
        key=jax.random.key(5),
        metric=metric,
        n_jobs=8000,
        n_replications=64,
        level=0.99,
    )
    ex = _exact_sens(0.8, metric)
    _covers(res, ex, ("lam", "scale", "logits"))
    assert res.status == "ok", res.status_reason()


@pytest.mark.slow
def test_quantile_crn_differences_agree_with_exact_quantile_differences():
    """d wait_p90 / d lam against a central difference of the exact quantile."""
    lam, h = _lam(), 1e-4
    res = sensitivity(
        small(),
        lam,
        wrt=("lam",),
        metric="wait_p90",
        key=jax.random.key(7),
        n_jobs=8000,
        n_replications=32,
        level=0.99,
    )
    assert res.methods["lam"] == "crn-difference"
    q = lambda x: float(exact(small(), x).wait_quantile(0.9))  # noqa: E731
    d = (q(lam + h) - q(lam - h)) / (2 * h)
    e = res.derivatives["lam"]
    # the CRN step (2% of lam) adds an O(h^2) bias well inside the interval
    assert e.low <= d <= e.high, (e, d)


@pytest.mark.slow
def test_event_policy_crn_difference_agrees_with_the_reference_simulator():
    """first-fit: d response_mean / d lam by the event engine (CRN) against a long CRN
    central difference of tests/references/mjqm_events.py (heapq, no jaxqueue code)."""
    from tests.references.mjqm_events import event_simulate

    wl = small()
    lam = _lam(0.7)
    res = sensitivity(
        wl,
        lam,
        "first-fit",
        wrt=("lam",),
        metric="response_mean",
        key=jax.random.key(11),
        n_jobs=4000,
        n_replications=32,
        level=0.99,
    )
    rng = np.random.default_rng(0)
    n, h = 300_000, 0.02 * lam
    cls = rng.choice(2, size=n, p=PROBS)
    sigma = rng.exponential(1.0, size=n) * np.asarray(MEANS)[cls]
    e = rng.exponential(1.0, size=n)
    alpha = np.asarray([1, 2])[cls]

    def resp(x):
        out = event_simulate(4, alpha, sigma, e / x, warmup=n // 20, policy="first-fit")
        return float(np.mean(out["wait"][n // 20 :] + sigma[n // 20 :]))

    d = (resp(lam + h) - resp(lam - h)) / (2 * h)
    est = res.derivatives["lam"]
    slack = 2 * float(est.half_width)  # the reference's own noise: one long run, no interval
    assert est.low - slack <= d <= est.high + slack, (est, d)


def test_event_quantile_crn_difference_agrees_with_exact_quantile_differences():
    """window:1 (FCFS run by the event engine): d wait_p90 / d lam from the replications'
    histogram quantiles against a central difference of the exact quantile, and the pooled
    quantile's interval against the exact quantile."""
    lam, h = _lam(), 1e-4
    res = sensitivity(
        small(),
        lam,
        "window:1",
        wrt=("lam",),
        metric="wait_p90",
        key=jax.random.key(13),
        n_jobs=2000,
        n_replications=16,
        level=0.999,
    )
    assert res.methods == {"lam": "crn-difference"} and res.start == "empty"
    q = lambda x: float(exact(small(), x).wait_quantile(0.9))  # noqa: E731
    d = (q(lam + h) - q(lam - h)) / (2 * h)
    e = res.derivatives["lam"]
    assert e.low <= d <= e.high, (e, d)
    assert res.value.low <= q(lam) <= res.value.high, (res.value, q(lam))


@pytest.mark.slow
def test_event_quantile_crn_difference_agrees_with_the_reference_simulator():
    """server-filling: d wait_p99 / d lam (CRN differences of the replications' histogram
    quantiles) against a long CRN central difference of the empirical quantile of
    tests/references/mjqm_events.py, and the value against the reference's quantile. The fast
    guard: test_event_quantile_crn_difference_agrees_with_exact_quantile_differences."""
    from tests.references.mjqm_events import event_simulate

    lam = _lam(0.7)
    res = sensitivity(
        small(),
        lam,
        "server-filling",
        wrt=("lam",),
        metric="wait_p99",
        key=jax.random.key(17),
        n_jobs=8000,
        n_replications=64,
        level=0.99,
    )
    assert res.methods == {"lam": "crn-difference"}
    rng = np.random.default_rng(1)
    n, h = 1_000_000, 0.02 * lam
    cls = rng.choice(2, size=n, p=PROBS)
    sigma = rng.exponential(1.0, size=n) * np.asarray(MEANS)[cls]
    e = rng.exponential(1.0, size=n)
    alpha = np.asarray([1, 2])[cls]

    def p99(x):
        out = event_simulate(4, alpha, sigma, e / x, warmup=n // 20, policy="server-filling")
        return float(np.quantile(out["wait"][n // 20 :], 0.99))

    d = (p99(lam + h) - p99(lam - h)) / (2 * h)
    est = res.derivatives["lam"]
    slack = 2 * float(est.half_width)  # the reference's own noise: one long run, no interval
    assert est.low - slack <= d <= est.high + slack, (est, d)
    v, ref = res.value, p99(lam)
    slack = float(v.half_width)  # the reference's run is longer than the estimate's total
    assert v.low - slack <= ref <= v.high + slack, (v, ref)


SMALL_TOML = """
servers = 4
[[classes]]
cores = 1
prob = 0.6
law = "exponential"
mean = 1.0
[[classes]]
cores = 2
prob = 0.4
law = "exponential"
mean = 2.0
"""


def test_cli_json_keys(tmp_path, capsys):
    path = tmp_path / "small.toml"
    path.write_text(SMALL_TOML)
    argv = ["mjqm", "sensitivity", "--scenario", str(path), "--lam", repr(_lam())]
    # the sizes of test_pathwise_and_score_cover_the_exact_derivatives: one compiled kernel
    status = main([*argv, "--jobs", "2000", "--replications", "16", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 0
    assert {"metric", "value", "value_ci", "derivatives", "status", "classes"} <= set(out)
    assert set(out["derivatives"]) == {"lam", "scale", "logits"}
    lam = out["derivatives"]["lam"]
    assert {"value", "ci", "method", "exact"} <= set(lam) and lam["method"] == "pathwise"
    assert len(out["derivatives"]["scale"]) == 2 and len(out["derivatives"]["logits"]) == 2
    assert out["derivatives"]["logits"][0]["method"] == "measure-valued"
    assert lam["exact"] == pytest.approx(_exact_sens()["lam"], rel=1e-6)
    assert len(out["classes"]) == 2 and out["status"] == "unconverged"
    stab = out["stability"]  # the limit the command checked lam against, computed once
    assert stab["method"] == "exact"
    assert stab["lambda_c"] == pytest.approx(float(exact_lambda_c(small())), rel=1e-9)


def test_cli_refuses_a_load_beyond_lambda_c_in_one_line(tmp_path, capsys):
    """Below lambda_ideal but beyond the exact lambda_c: refused before anything runs, with
    the limit named (no estimate, no exact derivatives compiled)."""
    path = tmp_path / "small.toml"
    path.write_text(SMALL_TOML)
    lam = 0.5 * (float(exact_lambda_c(small())) + float(small().lambda_ideal()))
    status = main(["mjqm", "sensitivity", "--scenario", str(path), "--lam", repr(lam)])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert status == 1 and "Traceback" not in "\n".join(err)  # the model refuses the input
    assert len(err) == 2 and "stability limit" in err[0], err  # the limit, then the refusal
    assert "lambda_c = 1.69273" in err[1], err


@pytest.mark.parametrize(
    "extra", [["--wrt", "lam,mu"], ["--metric", "wait_p200"], ["--policy", "nope"]]
)
def test_cli_bad_input_one_line(extra, capsys):
    status = main(["mjqm", "sensitivity", "--scenario", "five-class-exp", "--lam", "1", *extra])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    assert len([x for x in err.splitlines() if x.strip()]) == 1


def test_measure_valued_cut_at_its_horizon_is_not_ok():
    """A class change whose paths have not coupled within the horizon misses the rest of its
    effect: the status says biased (the same run with the default horizon is ok)."""
    lam, key = _lam(0.8), jax.random.key(19)
    sizes = dict(wrt=("logits",), key=key, n_jobs=2000, n_replications=64)
    res = sensitivity(small(), lam, coupling=Coupling(horizon=2), **sizes)
    assert res.status == "biased" and "not coupled within 2 jobs" in res.status_reason()
    assert sensitivity(small(), lam, **sizes).status == "ok"


def test_bad_arguments_refused():
    with pytest.raises(ValueError, match="wrt"):
        sensitivity(small(), 0.5, wrt=("mu",), key=jax.random.key(0))
    with pytest.raises(ValueError, match="metric"):
        sensitivity(small(), 0.5, metric="wait_var", key=jax.random.key(0))
    with pytest.raises(ValueError, match="stability|lambda"):
        sensitivity(small(), 10.0, key=jax.random.key(0))


def _coverage(runs, n_jobs, n_replications, load=0.6):
    lam = _lam(load)
    ex = _exact_sens(load)
    hits = {"lam": 0, "scale": np.zeros(2), "logits": np.zeros(2)}
    for r in range(runs):
        res = sensitivity(
            small(), lam, key=jax.random.key(100 + r), n_jobs=n_jobs, n_replications=n_replications
        )
        for k in hits:
            e = res.derivatives[k]
            hits[k] = hits[k] + ((e.low <= ex[k]) & (ex[k] <= e.high))
    return {k: np.asarray(v, float) / runs for k, v in hits.items()}


def test_fast_coverage_check():
    """10 runs of the compiled size above: a 95% interval misses 4 of 10 with probability
    below 1e-3 (binomial); a biased derivative misses far more."""
    cov = _coverage(10, 2000, 16)
    for k, v in cov.items():
        assert np.all(v >= 0.7), (k, cov)


@pytest.mark.slow
def test_coverage_of_the_95_intervals():
    """100 runs of 64 x 4000 jobs at 0.8 lambda_c: each derivative's coverage in [0.88, 0.99]
    (a 95% rate gives that range with probability about 0.99)."""
    cov = _coverage(100, 4000, 64, load=0.8)
    for k, v in cov.items():
        assert np.all((v >= 0.88) & (v <= 0.99)), (k, cov)


def _numpy_waits(u, lam, probs, cores, means, s):
    """Independent MJSRE eq. (2) with a full sort, inputs from the same uniforms."""
    W = np.zeros(s)
    out = []
    cdf = np.cumsum(probs)
    for row in u:
        c = int(np.sum(row[0] > cdf[:-1]))
        a = cores[c]
        sig = -means[c] * np.log(row[1])
        tau = -np.log(row[2]) / lam
        w = W[a - 1]
        out.append(w)
        new = W.copy()
        new[:a] = w + sig
        W = np.maximum(np.sort(new) - tau, 0.0)
    return np.array(out)


def test_recurrence_waits_match_sorted_recurrence():
    """The waits sensitivity differentiates (replication 1 from an empty start, five-class-exp
    at 0.9) against the sorted recurrence in numpy on the same uniforms, and its per-class
    means against numpy on those waits."""
    import jax.numpy as jnp

    from jaxqueue.mjqm import job_uniforms
    from jaxqueue.mjqm._sensitivity import _metric, _params, _run
    from jaxqueue.scenarios import get

    wl, key, n, lam = get("five-class-exp"), jax.random.key(3), 300, 0.9
    params = _params(wl, lam, jnp.float64)
    W0 = jnp.zeros((2, wl.s), jnp.float64)
    w, _, cls = _run(wl, key, n, params, 1, W0[1])
    u = np.asarray(job_uniforms(key, 1, jnp.arange(n), 3, jnp.float64))
    means = np.asarray(wl.mean_service())
    ref = _numpy_waits(u, lam, np.asarray(wl.probs), [1, 2, 5, 10, 15], means, 20)
    np.testing.assert_allclose(np.asarray(w), ref, rtol=1e-10, atol=1e-10)
    _, per, _ = _metric(wl, params, key, W0, kind="wait", q=None, warm=0, n_jobs=n)
    cls = np.asarray(cls)
    for c in range(5):
        np.testing.assert_allclose(float(per[1, c]), ref[cls == c].mean(), rtol=1e-10)
