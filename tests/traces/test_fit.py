"""Workloads fitted to job logs (``jaxqueue.traces.fit``, ``jaxqueue workload fit``): a log the
package draws from a known workload (Poisson arrivals, phase-type laws) fits back to it (class
probabilities, means, the law families; the exact mean wait of the fitted workload near the
generating one's), the class rule on a hand-made log, and the file round trip."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from jaxqueue import scenarios, traces
from jaxqueue.cli import main
from jaxqueue.dist import Erlang, Exponential, HyperExponential
from jaxqueue.mjqm import Workload, exact

from .test_read import DATA


def _balanced_h2(mean, scv):
    p = 0.5 * (1 + np.sqrt((scv - 1) / (scv + 1)))
    return HyperExponential([mean / (2 * p), mean / (2 * (1 - p))], [p, 1 - p])


def _ph_workload():
    laws = [Exponential(1.0), Erlang(4, 2.0), _balanced_h2(3.0, 4.0)]
    return Workload(12, [1, 4, 8], [0.6, 0.3, 0.1], laws, name="three-ph")


def _check_fit(wl, n, key, prob_tol, mean_tol, scv_tol):
    lam = 0.7 * float(wl.lambda_ideal())
    log = traces.synthetic(wl, lam, n, key=jax.random.key(key))
    f = traces.fit(log)
    assert f.lam == pytest.approx(lam, rel=3 / np.sqrt(n))
    assert f.interarrival_scv == pytest.approx(1.0, abs=6 / np.sqrt(n))
    assert [c["cores"] for c in f.classes] == [1, 4, 8]
    for c, p, law in zip(f.classes, np.asarray(wl.probs), wl.services, strict=True):
        assert c["prob"] == pytest.approx(p, abs=prob_tol)
        m = float(law.mean())
        assert c["mean"] == pytest.approx(m, rel=mean_tol)
        assert c["fitted_mean"] == pytest.approx(c["mean"], rel=1e-12)
        assert c["scv"] == pytest.approx(float(law.var()) / m**2, rel=scv_tol)
    assert [c["law"]["law"] for c in f.classes] == ["exponential", "erlang", "hyperexponential"]
    assert f.classes[1]["law"]["k"] == 4
    return f


def test_fit_recovers_a_known_workload_fast():
    """20,000 jobs: tolerances four standard errors or so (the slow test has the issue's)."""
    _check_fit(_ph_workload(), 20_000, 1, prob_tol=0.015, mean_tol=0.06, scv_tol=0.25)


@pytest.mark.slow
def test_fit_recovers_a_known_workload():
    """Class probabilities within 1% (absolute), means within 2%: 1,600,000 jobs, where the
    rarest class (p = 0.1, scv 4) has a mean of relative standard error 0.5% (2% is four)."""
    _check_fit(_ph_workload(), 1_600_000, 2, prob_tol=0.01, mean_tol=0.02, scv_tol=0.12)


def test_fitted_exact_wait_near_the_generating_one():
    """Exponential laws (the exact solver of this version): the fitted workload's exact mean
    wait within 5% of the generating workload's, at 20,000 jobs."""
    wl = Workload(4, [1, 3], [0.7, 0.3], [Exponential(1.0), Exponential(2.0)])
    lam = 0.6 * float(wl.lambda_ideal())
    log = traces.synthetic(wl, lam, 20_000, key=jax.random.key(5))
    f = traces.fit(log, laws="exponential")
    truth = float(exact(wl, lam).wait_mean)
    fitted = float(exact(f.workload, f.lam).wait_mean)
    assert fitted == pytest.approx(truth, rel=0.05)


def test_fit_of_a_phase_type_log_acceptance():
    """A fit at 100,000 jobs of a known workload (Poisson arrivals,
    hyperexponential, exponential and Erlang laws; at 0.42 lambda_ideal, about half of
    lambda_c = 2.2374): class probabilities within 1% (absolute), means within 2%, the law
    families and the fitted workload's exact mean wait within 5% of the generating one's
    (an exponential-only fit of the same log is about 30% off)."""
    laws = [_balanced_h2(1.0, 2.0), Exponential(1.5), Erlang(4, 1.0)]
    wl = Workload(6, [1, 2, 4], [0.5, 0.25, 0.25], laws, name="three-ph-small")
    lam = 0.42 * float(wl.lambda_ideal())
    f = traces.fit(traces.synthetic(wl, lam, 100_000, key=jax.random.key(1)))
    assert [c["cores"] for c in f.classes] == [1, 2, 4]
    for c, p, law in zip(f.classes, np.asarray(wl.probs), wl.services, strict=True):
        assert c["prob"] == pytest.approx(p, abs=0.01)
        assert c["mean"] == pytest.approx(float(law.mean()), rel=0.02)
    assert [c["law"]["law"] for c in f.classes] == ["hyperexponential", "exponential", "erlang"]
    assert f.classes[2]["law"]["k"] == 4
    truth = float(exact(wl, lam).wait_mean)
    assert float(exact(f.workload, f.lam).wait_mean) == pytest.approx(truth, rel=0.05)


def test_class_rule(tmp_path):
    """Sizes 1 (50 jobs), 2 (1 job: under 1%, merged into 4), 4 (40), 6 (9), 16 (1 job: the
    largest, kept); at most 3 classes: the rarest but the largest, 6, merges into 16."""
    sizes = [1] * 50 + [2] + [4] * 40 + [6] * 9 + [16]
    rows = "".join(f"{i},{c},{1 + i % 3}\n" for i, c in enumerate(sizes))
    path = tmp_path / "sizes.csv"
    path.write_text("# MaxProcs: 16\nsubmit,cores,runtime\n" + rows)
    f = traces.fit(path, max_classes=3)
    assert [c["cores"] for c in f.classes] == [1, 4, 16]
    assert [c["jobs"] for c in f.classes] == [50, 41, 10]
    assert [c["sizes"] for c in f.classes] == [[1], [2, 4], [6, 16]]
    f5 = traces.fit(path)
    assert [c["cores"] for c in f5.classes] == [1, 4, 6, 16]
    with pytest.raises(ValueError, match="max_classes must be an integer >= 1"):
        traces.fit(path, max_classes=0)
    with pytest.raises(ValueError, match="laws must be one of"):
        traces.fit(path, laws="gamma")


def test_report_figures_by_hand(tmp_path):
    """One class of run times 1, 2, 3, 6: mean 3, scv 3.5 / 9; Erlang-3 (round(9 / 3.5)) of
    mean 3; work share 1; arrival rate 3 / 3 s."""
    path = tmp_path / "one.csv"
    path.write_text("# MaxProcs: 4\nsubmit,cores,runtime\n0,2,1\n1,2,2\n2,2,3\n3,2,6\n")
    (c,) = traces.fit(path).classes
    assert c["mean"] == pytest.approx(3.0) and c["scv"] == pytest.approx(3.5 / 9)
    assert c["law"] == {"law": "erlang", "mean": 3.0, "k": 3}
    assert c["fitted_scv"] == pytest.approx(1 / 3) and c["work_share"] == pytest.approx(1.0)
    assert traces.fit(path).lam == pytest.approx(1.0)
    # p99 of 1, 2, 3, 6 (linear interpolation): 3 + 0.97 * 3; the fitted one solves the
    # Erlang-3 (phase rate 1) cdf 1 - exp(-t) (1 + t + t^2 / 2) = 0.99; the Kolmogorov-Smirnov
    # distance is largest just below 6: F(6) - 3 / 4 = 1 / 4 - 25 exp(-6)
    assert c["p99"] == pytest.approx(5.91, rel=1e-12)
    t = c["fitted_p99"]
    assert 1 - np.exp(-t) * (1 + t + t**2 / 2) == pytest.approx(0.99, abs=1e-10)
    assert c["ks"] == pytest.approx(0.25 - 25 * np.exp(-6), rel=1e-9)


def test_empirical_laws(tmp_path):
    """``laws="empirical"``: each class resamples its own run times (the fitted moments and
    p99 are the log's, the KS distance 0); no workload-file form; a class with a run time of 0
    (a job that ran, in handwritten.swf) is refused in one line naming the log."""
    path = tmp_path / "one.csv"
    path.write_text("# MaxProcs: 4\nsubmit,cores,runtime\n0,2,1\n1,2,6\n2,2,3\n3,2,2\n")
    f = traces.fit(path, laws="empirical")
    (c,) = f.classes
    assert c["law"] == {"law": "empirical"} and c["ks"] == 0.0
    assert c["fitted_mean"] == pytest.approx(3.0) and c["fitted_scv"] == pytest.approx(3.5 / 9)
    assert c["fitted_p99"] == c["p99"] == pytest.approx(5.91, rel=1e-12)
    np.testing.assert_array_equal(np.asarray(f.workload.services[0].values), [1, 6, 3, 2])
    with pytest.raises(ValueError, match="no workload-file form"):
        f.to_toml()
    with pytest.raises(ValueError) as err:
        traces.fit(DATA / "handwritten.swf", laws="empirical")
    msg = str(err.value)
    assert msg.startswith(str(DATA / "handwritten.swf")) and "\n" not in msg
    assert "1 of the 2 jobs of 1 cores ran 0 s" in msg, msg


def test_cli_writes_an_ordinary_workload_file(tmp_path, capsys):
    out = tmp_path / "gaia.toml"
    log = DATA / "unilu-gaia-2014-2-head.swf"
    assert main(["workload", "fit", str(log), "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    wl = scenarios.get(str(out))
    assert wl.s == 2004 and report["servers"] == 2004 and report["jobs"] == 200
    assert [int(c) for c in np.asarray(wl.cores_array)[:, 0]] == [
        c["cores"] for c in report["classes"]
    ]
    np.testing.assert_allclose(np.asarray(wl.probs), [c["prob"] for c in report["classes"]])
    assert main(["workload", "fit", str(DATA / "minimal.csv"), "--out", str(out)]) == 1
    assert "no machine size" in capsys.readouterr().err
    assert main(["workload", "fit", str(log), "--out", str(out), "--laws", "gamma"]) == 2


def test_fit_reports_bursty_arrivals():
    """A log drawn with hyperexponential inter-arrival times of scv 4 (a renewal law of the
    workload): the fit keeps Poisson arrivals and reports the scv it saw."""
    p = 0.5 * (1 + np.sqrt(3 / 5))
    bursty = HyperExponential([1 / (2 * p), 1 / (2 * (1 - p))], [p, 1 - p])
    wl = Workload(4, [1, 2], [0.5, 0.5], [Exponential(1.0)] * 2, arrival=bursty)
    f = traces.fit(traces.synthetic(wl, 1.0, 20_000, key=jax.random.key(4)))
    assert f.lam == pytest.approx(1.0, rel=0.05)
    assert f.interarrival_scv == pytest.approx(4.0, rel=0.25)
    assert f.as_dict()["arrivals"] == "poisson" and f.workload.arrival is None


def test_fit_renewal_arrivals():
    """``arrivals="renewal"``: the bursty log's inter-arrival times fitted by two moments (a
    balanced hyperexponential of mean 1 and the log's scv), used by the package's simulators
    (a log drawn from the fitted workload has that scv); a Poisson log stays Poisson; no file
    form for a renewal law."""
    p = 0.5 * (1 + np.sqrt(3 / 5))
    bursty = HyperExponential([1 / (2 * p), 1 / (2 * (1 - p))], [p, 1 - p])
    wl = Workload(4, [1, 2], [0.5, 0.5], [Exponential(1.0)] * 2, arrival=bursty)
    f = traces.fit(traces.synthetic(wl, 1.0, 20_000, key=jax.random.key(4)), arrivals="renewal")
    law = f.workload.arrival
    assert isinstance(law, HyperExponential) and f.as_dict()["arrivals"] == "renewal"
    assert f.arrival_law["law"] == "hyperexponential"
    assert float(law.mean()) == pytest.approx(1.0, rel=1e-12)
    assert float(law.var()) == pytest.approx(f.interarrival_scv, rel=1e-12)
    q = np.asarray(law.probs) * np.asarray(law.means)
    assert q[0] == pytest.approx(q[1], rel=1e-12)  # balanced means
    again = traces.synthetic(f.workload, f.lam, 20_000, key=jax.random.key(6))
    gaps = np.diff(again.submit)
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(f.interarrival_scv, rel=0.25)
    with pytest.raises(ValueError, match="renewal arrival law has no workload-file form"):
        f.to_toml()
    poisson = Workload(4, [1, 2], [0.5, 0.5], [Exponential(1.0)] * 2)
    g = traces.fit(
        traces.synthetic(poisson, 1.0, 20_000, key=jax.random.key(4)), arrivals="renewal"
    )
    assert g.workload.arrival is None and g.arrival_law == {"law": "exponential", "mean": 1.0}
    with pytest.raises(ValueError, match="arrivals must be one of poisson, renewal"):
        traces.fit(DATA / "handwritten.swf", arrivals="hawkes")
