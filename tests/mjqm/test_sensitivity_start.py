"""The derivative of the stationary start of mjqm.sensitivity: the replay of each backward
sample from its horizon gives the sample back, its derivative equals central differences of
the sampler's own kernel (loynes_state, a separate implementation) at shifted parameters, and
carrying it removes the bias that a zero start tangent leaves at high load (checked against
the exact QBD's derivatives)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue.dist import Exponential
from jaxqueue.mjqm import (
    Workload,
    exact_lambda_c,
    exact_sensitivity,
    sample_backward,
    sensitivity,
)
from jaxqueue.mjqm._sensitivity import _fcfs
from jaxqueue.mjqm._sensitivity_start import start_derivative
from jaxqueue.mjqm.engines.recurrence import loynes_state
from jaxqueue.mjqm.options import Coupling

MEANS = (1.0, 2.0)
PROBS = (0.6, 0.4)


def small(means=MEANS) -> Workload:
    return Workload(4, [1, 2], list(PROBS), [Exponential(m) for m in means])


def _lam(load):
    return load * float(exact_lambda_c(small()))


def test_replay_gives_back_the_samples_and_their_derivative():
    """d M / d(lam, scale) of the replay against central differences of loynes_state (the
    backward kernel) at lam +- h and at scaled service means, on the samples of the most
    common stopping horizon (piecewise linear: the differences are exact but at a kink)."""
    wl, lam = small(), _lam(0.8)
    S = sample_backward(wl, lam, 16, key=jax.random.key(4), dtype=jnp.float64)
    theta = jnp.asarray([lam, 1.0, 1.0], jnp.float64)
    st = start_derivative(wl, S, theta)
    assert st.mismatch < 1e-12
    assert st.counts.shape == (16, 2) and np.all(st.counts.sum(1) == st.jobs)
    ell = np.asarray(S.ell)
    common = int(np.bincount(ell).argmax())
    ids = np.flatnonzero(ell == common)
    half, h = common // 2, 1e-6

    def M(workload, x):
        return np.asarray(loynes_state(workload, S.key, ids, half, x, jnp.float64))

    fd = [(M(wl, lam + h) - M(wl, lam - h)) / (2 * h)]
    for e in np.eye(2):
        up, dn = (
            small(tuple(np.multiply(MEANS, 1 + h * e))),
            small(tuple(np.multiply(MEANS, 1 - h * e))),
        )
        fd.append((M(up, lam) - M(dn, lam)) / (2 * h))
    fd = np.stack(fd, axis=-1)
    dW = np.asarray(st.dW0)[ids]
    close = np.all(np.isclose(dW, fd, rtol=1e-5, atol=1e-5), axis=(1, 2))
    assert close.mean() >= 0.9, (close, dW[~close], fd[~close])
    assert np.abs(dW).max() > 1.0  # a start that moves with the parameters


def _per_rep_lam(kw, wl, lam, key, carry):
    """Per replication, d wait_mean / d lam on the start and jobs of ``sensitivity``, with the
    start's derivative carried or left out (zero: the estimator before the replay)."""
    kb, kf = jax.random.split(key)
    R = kw["n_replications"]
    S = sample_backward(wl, lam, R, key=kb, override=True, dtype=jnp.float64)
    dW0 = jnp.zeros((R, wl.s, 3))
    if carry:
        dW0 = start_derivative(wl, S, jnp.asarray([lam, 1.0, 1.0]), scores=False).dW0
    start = (jnp.asarray(S.W), dW0, jnp.zeros((R, 2)))
    out, *_ = _fcfs(
        wl,
        lam,
        ("lam", "scale"),
        "wait",
        None,
        kf,
        kw["n_jobs"],
        R,
        0,
        start,
        jnp.float64,
        None,
        False,
        Coupling(),
    )
    return np.asarray(out["lam"][0][:, 0])


def test_start_derivative_enters_the_estimate_and_covers():
    """0.9 lambda_c, no warm-up: the pathwise derivatives cover the exact ones at 99.9%, and
    each replication's d/dlam is at least the zero-start-tangent one (the start's workload
    grows with lam: a non-negative term), above it on average."""
    wl, lam = small(), _lam(0.9)
    kw = dict(n_jobs=2000, n_replications=16)
    ex = exact_sensitivity(wl, lam)
    res = sensitivity(wl, lam, wrt=("lam", "scale"), key=jax.random.key(21), level=0.999, **kw)
    for name in ("lam", "scale"):
        e = res.derivatives[name]
        assert np.all((e.low <= ex[name]) & (ex[name] <= e.high)), (name, e, ex[name])
    new = _per_rep_lam(kw, wl, lam, jax.random.key(21), carry=True)
    old = _per_rep_lam(kw, wl, lam, jax.random.key(21), carry=False)
    assert new.mean() == pytest.approx(float(res.derivatives["lam"].mean), rel=1e-12)
    assert np.all(new - old >= -1e-9 * np.abs(old))
    assert new.mean() - old.mean() > 0.01 * ex["lam"]


def test_a_start_the_replay_does_not_give_back_is_biased(monkeypatch):
    """A backward sample that is not the state its horizon's jobs lead to (here moved by one
    unit of work): its derivative cannot be the replay's, and the status says so."""
    import dataclasses

    from jaxqueue.mjqm import _sensitivity

    def moved(*args, **kw):
        S = sample_backward(*args, **kw)
        return dataclasses.replace(S, W=np.asarray(S.W) + 1.0)

    monkeypatch.setattr(_sensitivity, "sample_backward", moved)
    wl, lam = small(), _lam(0.9)
    res = sensitivity(
        wl, lam, wrt=("lam", "scale"), key=jax.random.key(21), n_jobs=2000, n_replications=16
    )
    assert res.status == "biased" and "replayed start" in res.status_reason()
