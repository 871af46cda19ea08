"""Replays of job logs (``jaxqueue.traces.replay``): a hand-worked FCFS log, and a log the
package generates from a known workload, written as SWF and read back, whose replay under
fcfs, first-fit and easy-backfilling gives every job the start time of the independent heapq
simulator (``tests/references/mjqm_events.run_trace``) to 1e-9."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from jaxqueue import traces
from jaxqueue.dist import Erlang, Exponential, HyperExponential
from jaxqueue.mjqm import Workload
from tests.references import mjqm_events as ref

from .test_read import DATA


def test_handwritten_fcfs():
    """FCFS on 8 cores, worked by hand: jobs 1-3 start at once; job 5 (8 cores, at 3) waits
    for the last of them to end (10); jobs 6, 7 and 10 behind it start when it ends (13)."""
    r = traces.replay(DATA / "handwritten.swf", "fcfs")
    np.testing.assert_array_equal(r.log.job, [1, 2, 3, 5, 6, 7, 10])
    np.testing.assert_allclose(r.start, [0, 1, 2, 10, 13, 13, 13], atol=1e-12)
    np.testing.assert_allclose(r.wait, [0, 0, 0, 7, 8, 7, 5], atol=1e-12)
    assert r.status == "ok" and r.servers == 8
    out = r.as_dict(compare=True)
    assert out["jobs"] == 7 and out["wait_mean"] == pytest.approx(27 / 7)
    # recorded waits 0, 4, 2, 0, 0, 0 for jobs 1, 2, 5, 6, 7, 10 (job 3: missing): only job 1 agrees
    assert out["recorded"]["compared"] == 6 and out["recorded"]["differ"] == 5
    assert out["left_out"]["partial executions"] == 2


def _workload():
    laws = [Exponential(1.0), Erlang(3, 2.0), HyperExponential([6.0, 0.5], [0.2, 0.8])]
    return Workload(10, [1, 3, 7], [0.6, 0.3, 0.1], laws, name="three-ph")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A log of 300 jobs of a known workload near 80% of its ideal load, as an SWF file."""
    wl = _workload()
    lam = 0.8 * float(wl.lambda_ideal())
    log = traces.synthetic(wl, lam, 300, key=jax.random.key(7))
    path = tmp_path_factory.mktemp("logs") / "generated.swf"
    traces.write_swf(log, path)
    return path, log


def test_generated_log_round_trip(generated):
    path, log = generated
    back = traces.read(path)
    assert back.servers == 10 and len(back) == 300
    np.testing.assert_array_equal(back.submit, log.submit)
    np.testing.assert_array_equal(back.runtime, log.runtime)
    np.testing.assert_array_equal(back.cores, log.cores)


@pytest.mark.parametrize(
    "policy",
    ["fcfs", "first-fit", "easy-backfilling"]
    + [
        pytest.param(p, marks=pytest.mark.slow)
        for p in ("srpt-greedy", "maxweight", "msfq:4", "easy-backfilling:estimate=2")
    ],
)
def test_replay_matches_reference(generated, policy):
    path, log = generated
    r = traces.replay(path, policy)
    start, _ = ref.run_trace(policy, 10, log.cores, log.submit, log.runtime)
    assert r.status == "ok"
    np.testing.assert_allclose(r.start, start, rtol=0, atol=1e-9)
    assert r.wait_mean == pytest.approx(np.mean(np.asarray(start) - log.submit), abs=1e-9)


_SLOW_TIED = ("msf", "maxweight", "least-servers-first")


@pytest.mark.parametrize(
    "policy",
    [
        "balanced-splitting:0/3/0+7",
        "first-fit",
        "preemptive-first-fit",
        "easy-backfilling:estimate=2",
    ]
    + [pytest.param(p, marks=pytest.mark.slow) for p in _SLOW_TIED],
)
def test_replay_with_equal_submit_times(generated, policy):
    """Submit times in whole seconds (as in most archived logs), so that many tie: a policy
    whose simulations compare the fronts of several deques (per need, per class) by arrival
    time, which cannot tell which of two jobs of equal times came first, and EASY with
    estimates, whose estimated ends and reservations tie on whole seconds, replayed as the
    reference, job by job (before, first-fit's starts differed in 79 of the 300 jobs with
    status ok, and preemptive-first-fit's replay did not end)."""
    _, log = generated
    tied = dataclasses.replace(log, submit=np.floor(log.submit))
    assert len(np.unique(tied.submit)) < 250
    r = traces.replay(tied, policy)
    classes = np.searchsorted([1, 3, 7], tied.cores)
    start, _ = ref.run_trace(policy, 10, tied.cores, tied.submit, tied.runtime, classes=classes)
    assert r.status == "ok"
    np.testing.assert_allclose(r.start, start, rtol=0, atol=1e-9)


def test_compare_recorded(generated, tmp_path):
    """A log whose recorded waits are the reference's FCFS waits: the FCFS replay differs in
    no job, the first-fit replay in some."""
    _, log = generated
    start, _ = ref.run_trace("fcfs", 10, log.cores, log.submit, log.runtime)
    path = tmp_path / "recorded.swf"
    traces.write_swf(log, path, wait=np.asarray(start) - log.submit)
    same = traces.replay(path, "fcfs").compare_recorded()
    assert same["compared"] == 300 and same["differ"] == 0
    other = traces.replay(path, "first-fit").compare_recorded()
    assert other["differ"] > 0 and other["first_line_differing"] is not None


def test_refusals(tmp_path):
    with pytest.raises(ValueError, match="no machine size .* pass servers"):
        traces.replay(DATA / "minimal.csv")
    big = tmp_path / "big.csv"
    big.write_text("# MaxProcs: 4\nsubmit,cores,runtime\n0,2,1\n1,8,1\n")
    with pytest.raises(ValueError, match=r"big.csv:4: job 2 needs 8 cores, more than"):
        traces.replay(big)
    with pytest.raises(ValueError, match="unknown policy|policy"):
        traces.replay(DATA / "handwritten.swf", "no-such-policy")


def test_cli_replay(capsys):
    """``jaxqueue mjqm simulate --trace LOG --policy P --json``: the keys of a policy run, the
    hand-worked figures above (utilisation: 137.5 core-seconds of work over 25 s on 8 cores)."""
    import json

    from jaxqueue.cli import main

    log = str(DATA / "handwritten.swf")
    args = ["mjqm", "simulate", "--trace", log, "--policy", "fcfs", "--json"]
    assert main([*args, "--compare-recorded"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["jobs"] == 7 and out["status"] == "ok" and out["policy"] == "fcfs"
    assert out["wait_mean"] == pytest.approx(27 / 7)
    assert set(out["wait_quantiles"]) == {"0.5", "0.9", "0.99"}
    assert [c["cores"] for c in out["classes"]] == [1, 2, 4, 8]
    assert out["utilisation"] == pytest.approx(137.5 / 25 / 8)
    assert out["recorded"]["differ"] == 5
    assert main([*args, "--servers", "16"]) == 0
    assert json.loads(capsys.readouterr().out)["servers"] == 16
    assert main([*args, "--lam", "1"]) == 2
    assert main(["mjqm", "simulate", "--scenario", "five-class-exp", "--servers", "4"]) == 2
    capsys.readouterr()
