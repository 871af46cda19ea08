"""``jaxqueue mjqm simulate --trace LOG``: the options of ``mjqm simulate`` a replay honours
(``--jobs N``: the first N jobs that ran; ``--tail``, ``--level``) or refuses in one line
naming them, and the keys every policy run prints (``wait_quantiles`` / ``response_quantiles``
with ``..._ci`` overall and per class, ``stability``) with intervals by sections of the log in
time order, recomputed here from the replayed waits."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from scipy import stats as st

from jaxqueue import traces
from jaxqueue.cli import main
from jaxqueue.dist import Erlang, Exponential, HyperExponential
from jaxqueue.mjqm import Workload

from .test_read import DATA

LOG = str(DATA / "handwritten.swf")
ARGS = ["mjqm", "simulate", "--trace", LOG, "--policy", "fcfs", "--json"]


def _run(capsys, *extra):
    code = main([*ARGS, *extra])
    cap = capsys.readouterr()
    return code, (json.loads(cap.out) if code == 0 else None), cap.err


def test_jobs_replays_the_first_jobs(capsys):
    """--jobs 4: jobs 1, 2, 3 and 5 (job 4 was cancelled), worked by hand on 8 cores: job 5
    (8 cores, at 3) starts when job 1 ends (10): waits 0, 0, 0, 7."""
    code, out, _ = _run(capsys, "--jobs", "4")
    assert code == 0 and out["jobs"] == 4
    assert out["wait_mean"] == pytest.approx(7 / 4)
    r = traces.replay(LOG, "fcfs", jobs=4)
    np.testing.assert_allclose(r.wait, [0, 0, 0, 7], atol=1e-12)
    assert main([*ARGS, "--jobs", "100"]) == 0  # more than the log has: all of it
    assert json.loads(capsys.readouterr().out)["jobs"] == 7


@pytest.mark.parametrize(
    "extra",
    [
        ["--seed", "3"],
        ["--seed", "0"],
        ["--replications", "8"],
        ["--start", "empty"],
        ["--max-seconds", "5"],
        ["--override"],
        ["--dtype", "float32"],
    ],
)
def test_options_a_replay_cannot_honour_are_refused(capsys, extra):
    code, _, err = _run(capsys, *extra)
    assert code == 2
    lines = [x for x in err.strip().splitlines() if "error" in x]
    assert len(lines) == 1 and extra[0] in lines[0] and "Traceback" not in err


def test_replay_keys_small_log(capsys):
    """A 7-job log: the policy-run keys are there; no interval (too few jobs), with the
    reason; the stability limit is said not to apply."""
    code, out, _ = _run(capsys, "--tail", "1,7.5")
    assert code == 0
    for block in [out, *out["classes"]]:
        for kind in ("wait", "response"):
            assert set(block[f"{kind}_quantiles"]) == {"0.5", "0.9", "0.99"}
            assert block[f"{kind}_quantiles_ci"] == {"0.5": None, "0.9": None, "0.99": None}
            assert set(block[f"{kind}_tail"]) == {"1", "7.5"}
        assert block["wait_mean_ci"] is None
    assert out["wait_tail"]["1"] == pytest.approx(4 / 7)  # waits 0, 0, 0, 7, 8, 7, 5
    assert out["wait_tail"]["7.5"] == pytest.approx(1 / 7)
    assert "all" in out["intervals"]["none"]
    assert out["stability"]["lambda_c"] is None and out["stability"]["reason"]


def _workload():
    laws = [Exponential(1.0), Erlang(3, 2.0), HyperExponential([6.0, 0.5], [0.2, 0.8])]
    return Workload(10, [1, 3, 7], [0.6, 0.3, 0.1], laws, name="three-ph")


@pytest.fixture(scope="module")
def longer(tmp_path_factory):
    """1,000 jobs of the workload of test_replay (the same compiled kernel: both logs pad to
    1,024 jobs), as SWF."""
    wl = _workload()
    log = traces.synthetic(wl, 0.7 * float(wl.lambda_ideal()), 1000, key=jax.random.key(11))
    path = tmp_path_factory.mktemp("logs") / "longer.swf"
    traces.write_swf(log, path)
    return path


def _sections_mean(x, level):
    parts = np.array_split(np.asarray(x), 20)
    means = np.array([p.mean() for p in parts])
    h = st.t.ppf(0.5 + level / 2, 19) * means.std(ddof=1) / np.sqrt(20)
    return x.mean(), [x.mean() - h, x.mean() + h]


def test_intervals_by_sections(longer, capsys):
    """Each interval recomputed from the replayed waits: the mean's by batch means over 20
    consecutive sections (scipy's t quantile), the tail's likewise on the indicator; the
    quantiles' hold the value and lie inside the waits' range."""
    r = traces.replay(longer, "first-fit")
    code = main(
        ["mjqm", "simulate", "--trace", str(longer), "--policy", "first-fit", "--json"]
        + ["--tail", "0.5", "--level", "0.9"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["jobs"] == 1000 and out["intervals"]["level"] == 0.9
    m, ci = _sections_mean(r.wait, 0.9)
    assert out["wait_mean"] == pytest.approx(m, rel=1e-12)
    np.testing.assert_allclose(out["wait_mean_ci"], ci, rtol=1e-12)
    m, ci = _sections_mean((r.wait > 0.5).astype(float), 0.9)
    assert out["wait_tail"]["0.5"] == pytest.approx(m, rel=1e-12)
    np.testing.assert_allclose(out["wait_tail_ci"]["0.5"], np.clip(ci, 0, 1), rtol=1e-12)
    resp = r.wait + r.log.runtime
    m, ci = _sections_mean(resp, 0.9)
    np.testing.assert_allclose(out["response_mean_ci"], ci, rtol=1e-12)
    for kind, x in (("wait", r.wait), ("response", resp)):
        for q, v in out[f"{kind}_quantiles"].items():
            lo, hi = out[f"{kind}_quantiles_ci"][q]
            assert v == pytest.approx(np.quantile(x, float(q)), rel=1e-12)
            assert x.min() <= lo <= v <= hi <= x.max()
    c0 = out["classes"][0]  # the 1-core class: about 600 jobs, enough for sections
    x = r.wait[r.cls == 0]
    assert c0["jobs"] == x.size and x.size >= 400
    np.testing.assert_allclose(c0["wait_mean_ci"], _sections_mean(x, 0.9)[1], rtol=1e-12)
    assert c0["wait_quantiles_ci"]["0.9"] is not None
    assert out["classes"][2]["wait_mean_ci"] is None  # the 7-core class: about 100 jobs
    assert "2" in out["intervals"]["none"]
