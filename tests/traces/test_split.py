"""A log replayed in sections side by side (``traces._split``): each section's starts checked
exact against the sections before it, the failing ones replayed again with a longer warm-up;
the result equals the whole replay and the independent heapq simulator
(``tests/references/mjqm_events.run_trace``) job by job, and the time integrals summed from the
starts equal the engine's own sums."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxqueue import traces
from jaxqueue.dist import Erlang, Exponential, HyperExponential
from jaxqueue.mjqm import Workload
from tests.references import mjqm_events as ref


def _log(load, n, seed):
    laws = [Exponential(1.0), Erlang(3, 2.0), HyperExponential([6.0, 0.5], [0.2, 0.8])]
    wl = Workload(10, [1, 3, 7], [0.6, 0.3, 0.1], laws, name="three-ph")
    return traces.synthetic(wl, load * float(wl.lambda_ideal()), n, key=jax.random.key(seed))


# slow: the default suite checks the same (sections with a short warm-up, replayed again, equal to
# the whole replay and the reference, the same integrals) under easy-backfilling with requested
# times in tests/traces/test_requested.py::test_requested_matches_reference
@pytest.mark.slow
@pytest.mark.parametrize("policy", ["fcfs", "first-fit", "easy-backfilling"])
def test_sections_equal_whole_replay_and_reference(policy, monkeypatch):
    """1,000 jobs at 90% of the ideal load in 8 sections with a warm-up of 16 jobs (too short
    for some: they are replayed again)."""
    import jaxqueue.traces._replay as rp

    log = _log(0.9, 1000, 21)
    monkeypatch.setattr(rp, "MARGIN", 16)
    said = []
    cut = traces.replay(log, policy, sections=8, progress=said.append)
    whole = traces.replay(log, policy, sections=1)
    start, _ = ref.run_trace(policy, 10, log.cores, log.submit, log.runtime)
    np.testing.assert_allclose(cut.start, start, rtol=0, atol=1e-9)
    np.testing.assert_allclose(whole.start, start, rtol=0, atol=1e-9)
    assert any("again" in s for s in said)  # some sections needed a longer warm-up
    assert any("1000/1000" in s for s in said)
    for name in ("idle_servers", "hol_idle_servers", "number_in_system", "makespan"):
        assert getattr(cut, name) == pytest.approx(getattr(whole, name), rel=1e-9), name
    np.testing.assert_allclose(cut.response_mean_class, whole.response_mean_class, rtol=1e-9)
