"""``easy-backfilling:estimate=requested``: EASY backfilling planned with a log's requested
times (SWF field 9), the jobs running their true run times, replayed job by job as the
independent heapq simulator (``tests/references/mjqm_events.run_trace`` with ``estimates``)
runs it; a log whose recorded waits are that simulator's is reproduced by
``--compare-recorded``, and differs under plain (clairvoyant) easy-backfilling."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
import pytest

from jaxqueue import traces
from jaxqueue.cli import main
from jaxqueue.dist import Erlang, Exponential, HyperExponential
from jaxqueue.mjqm import Workload
from jaxqueue.mjqm.engines.events import replay as engine_replay
from jaxqueue.traces._requested import EasyBackfillingRequested
from tests.references import mjqm_events as ref

POLICY = "easy-backfilling:estimate=requested"


@pytest.fixture(scope="module")
def requested(tmp_path_factory):
    """300 jobs at 85% of the ideal load on 10 cores, with requests: most 1-4x the run time
    rounded up to a whole unit, one in ten missing (-1), one in twenty below the run time (the
    job ran past it)."""
    laws = [Exponential(1.0), Erlang(3, 2.0), HyperExponential([6.0, 0.5], [0.2, 0.8])]
    wl = Workload(10, [1, 3, 7], [0.6, 0.3, 0.1], laws, name="three-ph")
    log = traces.synthetic(wl, 0.85 * float(wl.lambda_ideal()), 300, key=jax.random.key(3))
    rng = np.random.default_rng(5)
    req = np.ceil(log.runtime * rng.uniform(1.0, 4.0, len(log)))
    u = rng.uniform(size=len(log))
    req = np.where(u < 0.1, -1.0, np.where(u > 0.95, 0.5 * log.runtime, req))
    log = dataclasses.replace(log, requested_time=req)
    # the estimate rule, written out here: the request where known and not below the run time
    est = np.where((req > 0) & (req >= log.runtime), req, log.runtime)
    start, _ = ref.run_trace(POLICY, 10, log.cores, log.submit, log.runtime, estimates=est)
    path = tmp_path_factory.mktemp("logs") / "requested.swf"
    traces.write_swf(log, path, wait=np.asarray(start) - log.submit)
    return path, log, np.asarray(start), est


def test_requested_matches_reference(requested, monkeypatch):
    import jaxqueue.traces._replay as rp

    path, log, start, est = requested
    r = traces.replay(path, POLICY)
    assert r.status == "ok" and r.policy == POLICY
    np.testing.assert_allclose(r.start, start, rtol=0, atol=1e-9)
    assert r.estimates == {
        "requested time": int(np.sum((log.requested_time > 0) & (est == log.requested_time))),
        "run time (no request)": int(np.sum(log.requested_time <= 0)),
        "run time (ran past its request)": int(
            np.sum((log.requested_time > 0) & (log.requested_time < log.runtime))
        ),
    }
    # in sections side by side (each checked exact, the estimates cut with the jobs), with a
    # warm-up of 16 jobs (too short for some: they are replayed again): the same starts and
    # time integrals (the default suite's check of traces._split; test_split.py: slow cases)
    monkeypatch.setattr(rp, "MARGIN", 16)
    said = []
    r4 = traces.replay(path, POLICY, sections=3, progress=said.append)
    np.testing.assert_allclose(r4.start, start, rtol=0, atol=1e-9)
    assert any("again" in s for s in said) and any("300/300" in s for s in said), said
    for name in ("idle_servers", "hol_idle_servers", "number_in_system", "makespan"):
        assert getattr(r4, name) == pytest.approx(getattr(r, name), rel=1e-9), name
    np.testing.assert_allclose(r4.response_mean_class, r.response_mean_class, rtol=1e-9)


def test_grown_columns_replay_their_own_jobs(requested):
    """A replay of two columns from a first buffer of 16 rows: the second column's rows fill
    and it goes on alone with 32, the first (half the work) never fills; each column's starts
    are the reference's on its own jobs (the grown column must read its own, not the
    first's)."""
    _, log, _, est = requested
    cls = np.searchsorted([1, 3, 7], log.cores)
    works = np.stack([0.5 * log.runtime, log.runtime], axis=1)
    sizes = np.stack([0.5 * est, est], axis=1)
    laws = [Exponential(1.0), Erlang(3, 2.0), HyperExponential([6.0, 0.5], [0.2, 0.8])]
    wl = Workload(10, [1, 3, 7], [0.6, 0.3, 0.1], laws)
    both = lambda x: np.stack([x, x], axis=1)  # noqa: E731
    r = engine_replay(
        wl, EasyBackfillingRequested(), both(log.submit), both(cls), works, sizes=sizes, buffer=16
    )
    assert r.buffer == 32 and not (r.overflow or r.capped)
    for j in range(2):
        start, _ = ref.run_trace(
            POLICY, 10, log.cores, log.submit, works[:, j], estimates=sizes[:, j]
        )
        np.testing.assert_allclose(r.start[:, j], start, rtol=0, atol=1e-9)


def test_compare_recorded_with_requested_times(requested, capsys):
    """The log records the reference's starts under requested-time estimates: the replay under
    them differs in no job; clairvoyant EASY (planning with the true run times) in some."""
    path, *_ = requested
    args = ["mjqm", "simulate", "--trace", str(path), "--json", "--compare-recorded"]
    assert main([*args, "--policy", POLICY]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == POLICY and out["recorded"]["compared"] == 300
    assert out["recorded"]["differ"] == 0
    assert out["estimates"]["run time (no request)"] > 0
    # two logs (other class means: the kernel traced again) under easy-backfilling in one
    # process: its pick's branch must not keep the first trace's values
    first = traces.replay(path, "easy-backfilling", jobs=200)
    assert first.status == "ok" and len(first.wait) == 200
    assert main([*args, "--policy", "easy-backfilling"]) == 0
    assert json.loads(capsys.readouterr().out)["recorded"]["differ"] > 0
