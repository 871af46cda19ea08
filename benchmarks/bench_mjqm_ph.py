"""The exact stability limit with phase-type services (``mjqm.exact_lambda_c``) against plain
numpy/scipy in the same run.

The baseline is ``tests/references/mjqm_ph_ctmc.lambda_c``: the saturated queue enumerated state
by state in Python (its own (serving, head) states, scipy's sparse solve), written separately.
The package builds its index maps once per structure (numpy, timed apart as ``structure``),
then the rates (JAX) and one sparse LU with the implicit adjoint (``solve``); ``grad`` times
one backward pass in a phase mean. Sizes grow with ``s``: run at a size that takes minutes.

    python -m benchmarks.bench_mjqm_ph [S ...]
"""

from __future__ import annotations

import sys
import time

import equinox as eqx
import jax
import numpy as np

from jaxqueue.dist import Erlang, Exponential, HyperExponential
from jaxqueue.mjqm import Workload, exact_lambda_c, exact_size
from jaxqueue.mjqm._exact._api import _ph_lambda_c
from jaxqueue.mjqm._exact._ph import ph_key
from jaxqueue.mjqm._exact._ph_structure import ph_structure
from tests.references.mjqm_ph_ctmc import lambda_c as reference_lambda_c


def workloads(s: int) -> dict[str, Workload]:
    """Three classes of ``mjsre`` Table 2's shape (1, 2 and 5 cores) on ``s`` servers."""
    probs = [0.6, 0.25, 0.15]
    means = [0.5, 0.83, 1.25]
    cores = [1, 2, 5]
    return {
        f"erlang3 s={s}": Workload(s, cores, probs, [Erlang(3, m) for m in means]),
        f"hyperexp s={s}": Workload(
            s,
            cores,
            probs,
            [
                HyperExponential(np.array([50 * m, 0.505 * m]), np.array([0.01, 0.99]))
                for m in means
            ],
        ),
        f"exp s={s}": Workload(s, cores, probs, [Exponential(m) for m in means]),
    }


def run(sizes=(8,)) -> list[dict]:
    jax.config.update("jax_enable_x64", True)
    rows = []
    for s in sizes:
        for name, wl in workloads(s).items():
            forms = [tuple(np.asarray(x, float) for x in law.phase_form()) for law in wl.services]
            cores = tuple(int(c[0]) for c in wl.cores)
            t0 = time.perf_counter()
            ref = reference_lambda_c(
                s, cores, list(np.asarray(wl.probs)), *zip(*forms, strict=True)
            )
            t_ref = time.perf_counter() - t0
            t0 = time.perf_counter()
            st = ph_structure(ph_key(wl, s, cores))
            t_struct = time.perf_counter() - t0
            _ph_lambda_c(wl)  # compiles the rates
            t0 = time.perf_counter()
            lc = float(_ph_lambda_c(wl))
            t_solve = time.perf_counter() - t0
            t0 = time.perf_counter()
            jax.block_until_ready(eqx.filter_grad(_ph_lambda_c)(wl))
            t_grad = time.perf_counter() - t0
            rows.append(
                {
                    "workload": name,
                    "phases": exact_size(wl)["phases"],
                    "transitions": st.n_transitions,
                    "lambda_c": lc,
                    "rel_diff": abs(lc - ref) / ref,
                    "structure_s": t_struct,
                    "solve_s": t_solve,
                    "grad_s": t_grad,
                    "numpy_s": t_ref,
                    "dense_qbd": float(exact_lambda_c(wl)) if name.startswith("exp") else None,
                }
            )
            print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    run(tuple(int(x) for x in sys.argv[1:]) or (8,))
