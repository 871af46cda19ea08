"""The batched simulators run by the multi-host test, in and out of ``jax.distributed``."""

import jax
import numpy as np

from jaxqueue import sched
from jaxqueue.dist import get_law
from jaxqueue.mjqm import pile_growth, sample_backward, simulate
from jaxqueue.scenarios import get


def run_cases() -> dict:
    wl = get("five-class-exp")
    fwd = simulate(wl, 1.2, key=jax.random.key(0), n_jobs=2000, n_replications=8)
    # 600 samples: a batch of 512 (spread over the devices) and smaller ones (on one device)
    bwd = sample_backward(wl, 1.2, 600, key=jax.random.key(1), ell0=256)
    pile = pile_growth(wl, key=jax.random.key(3), jobs0=1 << 12, max_jobs=1 << 13)
    pool = sched.ClassAssignment([[0, 2], [1, 2]], [1.0, 1.0, 1.0])
    sch = sched.simulate(
        pool,
        [0.9, 0.9],
        get_law("bimodal"),
        m=1.0,
        key=jax.random.key(2),
        replications=8,
        jumps=5000,
        warmup=1000,
    )
    return {
        "forward_wait": np.asarray(fwd.wait_mean).tolist(),
        "forward_final_state": np.asarray(fwd.final_state).tolist(),
        "backward_W": np.asarray(bwd.W).tolist(),
        "sched_delay": np.asarray(sch.delay).tolist(),
        "pile_gamma": [pile.gamma, *pile.gamma_ci],
    }
