"""The size-aware policies' two ways of ordering the jobs (``policies._base.in_key_order``):
pairwise comparisons of the slots (up to ``_PAIRWISE`` slots, what the event engine runs) and
a sort of the slots (beyond), served sets equal on random job lists with many ties, inside the
engine's ``settling`` and outside it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue import scenarios
from jaxqueue._jit import settling
from jaxqueue.mjqm.policies import Jobs, _base, parse_policy

NEEDS = (15, 10, 5, 2, 1)  # five-class-exp, s = 20


def _job_lists(seed, B=12, R=256):
    """``R`` job lists of ``B`` slots: remaining work from few values (ties), half-empty
    lists, the five needs of five-class-exp."""
    rng = np.random.default_rng(seed)
    need = rng.choice(NEEDS, size=(B, R)).astype(np.int32)
    rem = rng.integers(1, 5, size=(B, R)) / 2.0
    if seed % 2:
        rem = rem + rng.exponential(size=(B, R)) * (rng.random((B, R)) < 0.5)
    run = rng.random((B, R)) < 0.3
    return Jobs(
        cls=jnp.asarray(np.searchsorted(sorted(NEEDS), need).astype(np.int32)),
        need=jnp.asarray(need),
        rem=jnp.asarray(rem),
        age=jnp.zeros((B, R)),
        wait=jnp.zeros((B, R)),
        started=jnp.asarray(run),
        run=jnp.asarray(run),
        count=jnp.asarray(rng.integers(0, B + 1, size=R).astype(np.int32)),
        size=jnp.asarray(rem + rng.integers(0, 3, size=(B, R))),
    )


@pytest.mark.parametrize(
    "name", ["srpt-greedy", "first-fit-srpt", "server-filling-srpt", "server-filling-gittins"]
)
# per-need counts packed 7 (4 bits) to a word; 4 (7 bits): two words for five needs (slow: the
# 128 unrolled terms run op by op outside jit)
@pytest.mark.parametrize("B", [12, pytest.param(128, marks=pytest.mark.slow)])
def test_pairwise_order_serves_what_the_sorted_order_serves(name, B, monkeypatch):
    pol = parse_policy(name).bind(scenarios.get("five-class-exp"))
    R = 256 if B < 64 else 32
    # the three seeds side by side (one call per order: the ops run eagerly, one at a time)
    lists = [_job_lists(seed, B=B, R=R) for seed in range(3)]
    jobs = jax.tree.map(lambda *x: jnp.concatenate(x, axis=-1), *lists)
    paired = np.asarray(pol.select(jobs, 20, NEEDS))
    with settling(jnp.int32(1)):
        settled = np.asarray(pol.select(jobs, 20, NEEDS))
    monkeypatch.setattr(_base, "_PAIRWISE", 0)
    sorted_ = np.asarray(pol.select(jobs, 20, NEEDS))
    monkeypatch.setattr(_base, "_PAIRWISE", 128)
    for seed in range(3):  # something is served in each
        assert paired[:, seed * R : (seed + 1) * R].sum() > 100
    np.testing.assert_array_equal(paired, sorted_)
    np.testing.assert_array_equal(settled, sorted_)


@pytest.mark.parametrize("needs", [NEEDS, (1, 2, 4, 8)])
def test_first_fit_from_counts_equals_the_scan(needs):
    """``_base.first_fit_counted`` (the starts per need from the counts of the candidates
    ahead) against ``_base.first_fit`` (the scan, run by run) in arrival order: random
    candidates, free servers 0..24 per list, the needs in either order, 1 to 33 slots."""
    rng = np.random.default_rng(len(needs))
    for B in (1, 6, 33):
        R = 1000
        need = rng.choice(needs, size=(B, R)).astype(np.int32)
        cand = rng.random((B, R)) < rng.random(R)
        free = rng.integers(0, 25, size=R).astype(np.int32)
        counts = [np.cumsum(cand & (need == v), axis=0) - (cand & (need == v)) for v in needs]
        args = jnp.asarray(cand), jnp.asarray(need), jnp.asarray(free)
        scan = np.asarray(_base.first_fit(*args))
        counted = _base.first_fit_counted(*args, needs, [jnp.asarray(c, jnp.int32) for c in counts])
        assert 0 < scan.sum() < cand.sum()  # some start, some do not fit
        np.testing.assert_array_equal(np.asarray(counted), scan)
