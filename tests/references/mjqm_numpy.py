"""Plain numpy references of the MJQM's Algorithms 1 and 2 (``mjsre`` Sections 4.4 and 5): the
benchmark baselines and independent checks of the JAX kernels, written from the paper."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _np_step(W, alpha, sigma, tau):
    """Eq. (2) by definition, with a full sort, vectorised over a batch ``W`` of shape (B, s)."""
    B, s = W.shape
    idx = np.arange(s)[None, :]
    Wa = W[np.arange(B), alpha - 1][:, None]
    S = np.maximum(W, Wa)
    S = S + sigma[:, None] * (idx < alpha[:, None])
    S = np.sort(S, axis=1) - tau[:, None]
    return np.maximum(S, 0.0)


def _np_inputs(rng, B, n, cores, probs, draw_sigma, lam):
    cls = rng.choice(len(cores), size=(n, B), p=probs)
    sigma = draw_sigma(rng, cls)
    tau = rng.exponential(1.0 / lam, size=(n, B))
    return cores[cls], sigma, tau


def sample_backward_numpy(
    s: int,
    cores,
    probs,
    draw_sigma: Callable,
    lam: float,
    n_samples: int,
    *,
    seed: int = 0,
    ell0: int = 1024,
    max_ell: int = 1 << 22,
) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 in plain numpy, as printed: a batch of samples vectorised together.

    The batch doubles ``ell`` until every sample has met the stopping rule (the paper's
    implementation, Section 7.2); the inputs of the past are stored and extended at each
    doubling (Algorithm 1, lines 6-9), and each pass restarts from the empty state at ``-ell``.
    ``draw_sigma(rng, cls)`` draws service times for an array of class indices.

    Returns:
        ``(W, ell)``: the samples ``(n, s)`` and the horizon each sample converged at.
    """
    rng = np.random.default_rng(seed)
    cores = np.asarray(cores)
    B = n_samples
    a, sg, t = _np_inputs(rng, B, ell0, cores, probs, draw_sigma, lam)
    ell = ell0
    Mmax = np.full((B, s), -np.inf)
    done = np.zeros(B, bool)
    stop = np.zeros(B, np.int64)
    while True:
        M = np.zeros((B, s))
        for j in range(ell - 1, -1, -1):
            M = _np_step(M, a[j], sg[j], t[j])
        grew = np.any(M > Mmax, axis=1)
        newly = ~grew & ~done
        stop[newly] = ell
        done |= newly
        Mmax = np.where(done[:, None], Mmax, M)
        if done.all() or 2 * ell > max_ell:
            break
        a2, sg2, t2 = _np_inputs(rng, B, ell, cores, probs, draw_sigma, lam)
        a, sg, t = (np.concatenate([x, y]) for x, y in ((a, a2), (sg, sg2), (t, t2)))
        ell *= 2
    stop[~done] = ell
    return Mmax, stop


def pile_growth_numpy(
    s: int, cores, probs, draw_sigma: Callable, n_jobs: int, replications: int, *, seed: int = 0
) -> np.ndarray:
    """Algorithm 2 in plain numpy (the benchmark baseline): ``|H_n| / n`` per replication.

    The pile is vectorised over replications with a sort per job and renormalised every job;
    inputs are drawn in blocks of 4096 jobs. ``draw_sigma(rng, cls)`` draws service times for
    an array of class indices.
    """
    rng = np.random.default_rng(seed)
    cores = np.asarray(cores)
    H = np.zeros((replications, s))
    off = np.zeros(replications)
    idx = np.arange(s)[None, :]
    R = np.arange(replications)
    done = 0
    while done < n_jobs:
        b = min(4096, n_jobs - done)
        cls = rng.choice(len(cores), size=(b, replications), p=probs)
        A = cores[cls]
        SG = draw_sigma(rng, cls)
        for j in range(b):
            a = A[j]
            Ha = H[R, a - 1][:, None]
            H = np.sort(np.maximum(H, Ha) + SG[j][:, None] * (idx < a[:, None]), axis=1)
            off += H[:, 0]
            H -= H[:, :1]
        done += b
    return (off + H[:, -1]) / n_jobs
