"""The exact stability limit with phase-type services (``mjqm.exact_lambda_c``) against plain
numpy/scipy in the same run.

The baseline is ``tests/references/mjqm_ph_ctmc.lambda_c``: the saturated queue enumerated state
by state in Python (its own (serving, head) states, scipy's sparse solve), written separately.
The package builds its index maps once per structure (numpy, timed apart as ``structure``),
then the rates (JAX) and one sparse LU with the implicit adjoint (``solve``); ``grad`` times
one backward pass in a phase mean. Sizes grow with ``s``: run at a size that takes minutes.

``--waits``: ``mjqm.exact`` with phase-type services and its waiting-time law (mean wait,
``P(W > 0)``, ``P(W > 2)``, the 0.99 quantile) on the five small systems of
``tests/references/mjqm_ph_ctmc.REFERENCE_SYSTEMS`` against that module's truncated explicit
chain (plain numpy/scipy: its own states, a sparse stationary solve, uniformisation), in the
same run.

    python -m benchmarks.bench_mjqm_ph [S ...]
    python -m benchmarks.bench_mjqm_ph --waits
"""

from __future__ import annotations

import sys
import time

import equinox as eqx
import jax
import numpy as np

from jaxqueue.dist import Erlang, Exponential, HyperExponential
from jaxqueue.mjqm import Workload, exact, exact_lambda_c, exact_size
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


def run_waits() -> list[dict]:
    """The package's exact solve and waiting-time law against the brute-force chain (times:
    the package's first call, compilation included, then the best of three; the baseline's
    one call builds, solves and inverts its tails)."""
    from tests.mjqm.test_exact_ph_solver import _workload
    from tests.references import mjqm_ph_ctmc as ref

    jax.config.update("jax_enable_x64", True)
    q, t = ref.REFERENCE_QUANTILE, 2.0
    rows = []
    for name, sysd in ref.REFERENCE_SYSTEMS.items():
        wl, lam = _workload(name), sysd["lam"]

        def package(wl=wl, lam=lam):
            res = exact(wl, lam)
            dist = res.wait_distribution(quantiles=(q,), times=(t,))
            out = (res.wait_mean, res.p_wait, dist.tail(t), dist.quantile(q))
            return [float(x) for x in jax.block_until_ready(out)]

        t0 = time.perf_counter()
        got = package()
        first = time.perf_counter() - t0
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            package()
            runs.append(time.perf_counter() - t0)
        args = [sysd[k] for k in ("s", "cores", "probs", "alphas", "Ts")]
        t0 = time.perf_counter()
        r = ref.solve(*args, lam, **sysd["cut"])
        want = [r.wait_mean, r.p_wait, float(r.wait_tail([t])[0][0]), r.wait_quantile(q)]
        t_ref = time.perf_counter() - t0
        rows.append(
            {
                "system": name,
                "phases": exact(wl, lam).phases,
                "reference_states": r.n_states,
                "wait_mean": got[0],
                "wait_p99": got[3],
                "rel_diff": max(abs(g - w) / abs(w) for g, w in zip(got, want, strict=True)),
                "first_s": first,
                "run_s": min(runs),
                "numpy_s": t_ref,
            }
        )
        print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    if sys.argv[1:] == ["--waits"]:
        run_waits()
    else:
        run(tuple(int(x) for x in sys.argv[1:]) or (8,))
