"""The MJSRE step and its variants against direct (sort-based) implementations of the equations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

# the step functions are internals of the recurrence: this file tests them directly
from jaxqueue.mjqm.engines.recurrence._step import (
    mjsre_merge,
    mjsre_step,
    mjsre_step_info,
    mmjsre_step_info,
    ra_step_info,
    random_subset,
    smjsre_step_info,
    wait_time,
)
from tests.helpers import assert_close


def ref_step(W, alpha, sigma, tau):
    """Eq. (2) literally: S^i = max(W^alpha, W^i), + sigma on i <= alpha, sort, - tau, clip."""
    W = np.asarray(W, dtype=float)
    S = np.maximum(W[alpha - 1], W)
    S[:alpha] += sigma
    return np.maximum(np.sort(S) - tau, 0.0)


def random_sorted(rng, n, s, ties=False):
    W = rng.exponential(2.0, size=(n, s))
    if ties:
        W = np.round(W)  # many equal coordinates and zeros
    W[:, : s // 4] = 0.0
    return np.sort(W, axis=1)


def test_step_matches_eq2_with_ties():
    rng = np.random.default_rng(0)
    s, n = 12, 400
    W = random_sorted(rng, n, s, ties=True)
    alpha = rng.integers(1, s + 1, size=n)
    sigma = rng.exponential(1.0, size=n)
    tau = rng.exponential(0.5, size=n)
    got = jax.jit(jax.vmap(mjsre_step))(W, alpha, sigma, tau)
    want = np.stack([ref_step(W[i], alpha[i], sigma[i], tau[i]) for i in range(n)])
    assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert np.all(np.diff(np.asarray(got), axis=1) >= 0)


def test_merge_is_pile_step_and_dtype_kept():
    W = jnp.asarray([0.0, 1.0, 2.0, 5.0], dtype=jnp.float32)
    out = mjsre_merge(W, 3, 1.5)
    assert out.dtype == jnp.float32
    assert_close(out, [3.5, 3.5, 3.5, 5.0])
    assert float(wait_time(W, 3)) == 2.0


def test_step_info_wait_hol_free():
    rng = np.random.default_rng(1)
    s, n = 10, 200
    W = random_sorted(rng, n, s)
    alpha = rng.integers(1, s + 1, size=n)
    sigma = rng.exponential(1.0, size=n)
    tau = rng.exponential(1.0, size=n)
    W2, info = jax.jit(jax.vmap(mjsre_step_info))(W, alpha, sigma, tau)
    for i in range(n):
        a = alpha[i]
        w = W[i, a - 1]
        X = np.sort(np.concatenate([np.full(a, w + sigma[i]), W[i, a:]]))
        assert_close(info.wait[i], w)
        assert_close(info.hol[i], np.sum(w - W[i, :a]), atol=1e-10)
        assert_close(info.free[i], np.sum(np.maximum(tau[i] - X, 0)), atol=1e-10)
        assert_close(W2[i], ref_step(W[i], a, sigma[i], tau[i]))


def ref_mm_step(Ws, alphas, sigma, tau):
    """Eq. (15): start = max_t W_t^{alpha_t}; the alpha_t first of each type go to start+sigma."""
    start = max([W[a - 1] for W, a in zip(Ws, alphas, strict=True) if a > 0])
    out = []
    for W, a in zip(Ws, alphas, strict=True):
        V = np.array(W, dtype=float)
        V[:a] = start + sigma
        out.append(np.maximum(np.sort(V) - tau, 0))
    return out, start


def test_multi_resource_step():
    rng = np.random.default_rng(2)
    sizes = (6, 3)
    mm = jax.jit(mmjsre_step_info)
    for _ in range(40):
        Ws = tuple(np.sort(rng.exponential(1.0, size=k)) for k in sizes)
        alphas = np.array([rng.integers(0, 7), rng.integers(0, 4)])
        if alphas.sum() == 0:
            alphas[0] = 1
        sigma, tau = rng.exponential(1.0), rng.exponential(0.5)
        (o1, o2), info = mm(Ws, alphas, sigma, tau)
        (r1, r2), start = ref_mm_step(Ws, alphas, sigma, tau)
        assert_close(o1, r1)
        assert_close(o2, r2)
        assert_close(info.wait, start)
    # one resource type: the plain MJSRE
    W = np.sort(rng.exponential(1.0, size=8))
    (o,), _ = mmjsre_step_info((W,), np.array([3]), 0.7, 0.2)
    assert_close(o, mjsre_step(W, 3, 0.7, 0.2))


def test_specific_and_random_assignment():
    rng = np.random.default_rng(3)
    s = 8
    step = jax.jit(smjsre_step_info)
    for _ in range(30):
        W = np.sort(rng.exponential(1.0, size=s))
        u = rng.random(s)
        a, b = int(rng.integers(0, 5)), int(rng.integers(0, 4))
        if a + b == 0:
            a = 1
        sigma, tau = rng.exponential(), rng.exponential(0.3)
        W2, info = step(W, a, b, sigma, tau, u)
        spec = np.argsort(u)[:b]  # the b smallest uniforms
        rest = [i for i in range(s) if i not in set(spec)][:a]
        chosen = np.zeros(s, bool)
        chosen[spec] = True
        chosen[rest] = True
        w = W[chosen].max()
        V = np.where(chosen, w + sigma, W)
        assert_close(info.wait, w)
        assert_close(info.hol, np.sum(w - W[chosen]))
        assert_close(W2, np.maximum(np.sort(V) - tau, 0))
    # no specific server: eq. (14) reduces to eq. (2)
    W = np.sort(rng.exponential(1.0, size=s))
    W2, _ = smjsre_step_info(W, 3, 0, 1.0, 0.5, rng.random(s))
    assert_close(W2, mjsre_step(W, 3, 1.0, 0.5))
    # random assignment of all servers = a job taking all servers
    W2, _ = ra_step_info(W, s, 1.0, 0.5, rng.random(s))
    assert_close(W2, mjsre_step(W, s, 1.0, 0.5))


@pytest.mark.parametrize("beta", [0, 1, 5, 8])
def test_random_subset_size_and_uniformity(beta):
    u = jax.random.uniform(jax.random.key(0), (4000, 8))
    masks = np.asarray(jax.vmap(random_subset, in_axes=(0, None))(u, beta))
    assert np.all(masks.sum(axis=1) == beta)
    # each position is chosen with probability beta / s (binomial 99.9% band)
    p = beta / 8
    sd = np.sqrt(p * (1 - p) / 4000)
    assert np.all(np.abs(masks.mean(axis=0) - p) <= 3.3 * sd + 1e-12)


def test_internal_engine_steps_are_the_step_functions():
    """The recurrence engine's step objects add no formula: each one's ``step`` / ``merge``
    equals the step function it stands for (those are checked against sorting and the event
    simulator above), ``step_for`` picks the step of the policy and the workload, and a policy
    with no recurrence form is refused in one line."""
    from jaxqueue.dist import Exponential
    from jaxqueue.mjqm import Workload
    from jaxqueue.mjqm.engines.recurrence._step import (
        mjsre_merge,
        mjsre_step,
        mmjsre_step,
        ra_step,
        smjsre_step,
    )
    from jaxqueue.mjqm.engines.recurrence._steps import (
        FCFSStep,
        RandomStep,
        SpecificStep,
        step_for,
    )
    from jaxqueue.mjqm.policies import FCFS, FirstFit, RandomAssignment

    rng = np.random.default_rng(7)
    for _ in range(20):
        W = jnp.asarray(np.sort(rng.exponential(1.0, 8)))
        a = int(rng.integers(1, 9))
        sg, t = float(rng.exponential()), float(rng.exponential(0.5))
        u = jnp.asarray(rng.uniform(size=8))
        np.testing.assert_array_equal(FCFSStep((8,)).step(W, a, sg, t), mjsre_step(W, a, sg, t))
        np.testing.assert_array_equal(FCFSStep((8,)).merge(W, a, sg), mjsre_merge(W, a, sg))
        np.testing.assert_array_equal(RandomStep().step(W, a, sg, t, u), ra_step(W, a, sg, t, u))
        b = int(rng.integers(0, 9 - a))
        np.testing.assert_array_equal(
            SpecificStep().step(W, jnp.asarray([a, b]), sg, t, u), smjsre_step(W, a, b, sg, t, u)
        )
        Ws = (W[:5], jnp.sort(W[5:] + 0.3))
        al = jnp.asarray([int(rng.integers(0, 6)), int(rng.integers(1, 4))])
        got = FCFSStep((5, 3)).step(jnp.concatenate(Ws), al, sg, t)
        np.testing.assert_array_equal(got, jnp.concatenate(mmjsre_step(Ws, al, sg, t)))
    w1 = Workload(4, [1, 2], [0.5, 0.5], [Exponential(1.0)] * 2)
    assert step_for(FCFS(), w1) == FCFSStep((4,))
    assert isinstance(step_for(RandomAssignment(), w1), RandomStep)
    w2 = Workload(4, [1, 2], [0.5, 0.5], [Exponential(1.0)] * 2, specific=[0, 1])
    assert isinstance(step_for(FCFS(), w2), SpecificStep)
    with pytest.raises(ValueError, match="first-fit: no recurrence form"):
        step_for(FirstFit(), w1)
