"""Coverage of the 95% intervals of a policy run's mean response time and p90 (issue 34, item 3).

The event engine's replications are independent, so one simulation of ``runs x reps``
replications is ``runs`` independent runs of ``reps`` replications each: every run's result is
summarised from its own replications (``engines.events._result._summarise`` on a slice of the
per-replication sums and histograms) with the intervals a user gets (the delta-method ratio
interval of the mean; Woodruff's interval of the quantile, ``stats.quantile_ci``), and the
share of runs whose interval holds the truth is the coverage (target 93-97%).

Truths, independent of the estimators: on a small exponential system (``s = 3``, needs 1 and
2), FCFS from the exact solver (``mjqm.exact``: mean response, p90 of the wait); the mean
response of a policy of the truncated CTMC over the queue contents
(``tests/references/mjqm_ctmc``: msf, least-servers-first, ...) from it; the p90 of the response
time (and the mean of a policy without a CTMC: maxweight, the size-aware ones) from a reference
run of 256 replications 16x longer than one run's (its interval is printed: it must be far
narrower than one run's).

    PYTHONPATH=. python benchmarks/bench_tails_coverage.py \
        [--runs 200 --reps 64 --jobs 4000 --policies fcfs,msf]
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from jaxqueue.dist import Exponential  # noqa: E402
from jaxqueue.mjqm import Workload, exact, simulate_policy  # noqa: E402
from jaxqueue.mjqm.engines.events import _simulate  # noqa: E402
from jaxqueue.mjqm.engines.events._accumulate import _wait_bins  # noqa: E402
from jaxqueue.mjqm.engines.events._result import _summarise  # noqa: E402

CASE = dict(s=3, cores=(1, 2), probs=(0.6, 0.4), mus=(1.0, 0.8))
LAM = 0.5


def workload() -> Workload:
    c = CASE
    return Workload(
        servers=c["s"],
        cores=c["cores"],
        probs=c["probs"],
        services=tuple(Exponential(1.0 / m) for m in c["mus"]),
        name="ctmc-3",
    )


def _runs(wl, policy, key, runs, reps, jobs, chunk=32):
    """Per-run results: ``runs`` independent runs of ``reps`` replications (simulated
    ``chunk`` runs at a time)."""
    from jaxqueue.mjqm.policies import parse_policy

    pol = parse_policy(policy)
    edges = _wait_bins(wl)[3]
    probs = np.asarray(wl.probs)
    out = []
    for first in range(0, runs, chunk):
        n = min(chunk, runs - first)
        k = jax.random.fold_in(key, first)
        sizes = (n * reps, jobs // 5, jobs)
        acc, overflow, capped, B = _simulate._runs(
            pol, wl, LAM, k, sizes, None, 4096, jax.numpy.float64
        )
        for i in range(n):
            cols = slice(i * reps, (i + 1) * reps)
            part = jax.tree.map(lambda x, c=cols: np.ascontiguousarray(np.asarray(x)[..., c]), acc)
            flags = (bool(overflow[cols].any()), bool(capped[cols].any()), int(B[cols].max()))
            rest = (jobs, jobs // 5, 0.95, ("given", None, None), edges)
            out.append(_summarise(pol.label, LAM, probs, part, *flags, *rest))
    return out


def coverage(results, truth_mean, truth_p90, kind):
    mean = np.mean(
        [float(r.response_mean.low) <= truth_mean <= float(r.response_mean.high) for r in results]
    )
    q = [getattr(r, f"{kind}_quantile_ci")(0.9) for r in results]
    p90 = np.mean([float(e.low) <= truth_p90 <= float(e.high) for e in q])
    ok = np.mean([r.status == "ok" for r in results])
    return mean, p90, ok


def _truth(wl, policy: str, jobs: int, ctmc) -> tuple[float, float, str, str]:
    """``(mean response, p90, which p90, how)`` of ``policy``: FCFS from the exact solver; a
    policy of the truncated CTMC, its mean from it and its response p90 from a reference run
    of 256 replications 16x longer than one run's; any other, both from that reference run."""
    if policy == "fcfs":
        ex = exact(wl, LAM)
        return float(ex.response_mean), float(ex.wait_quantile(0.9)), "wait", "exact"
    long = simulate_policy(
        wl, LAM, policy, key=jax.random.key(99), n_jobs=16 * jobs, n_replications=256
    )
    e, m = long.response_quantile_ci(0.9), long.response_mean
    how = (
        f"reference run 256 x {16 * jobs} jobs: p90 {float(e.mean):.5f} "
        f"[{float(e.low):.5f}, {float(e.high):.5f}], mean {float(m.mean):.5f} "
        f"[{float(m.low):.5f}, {float(m.high):.5f}]"
    )
    try:
        mean = ctmc.ctmc_policy(policy, lam=LAM, max_jobs=16, **CASE)["response_mean"]
        how += f"; mean from the truncated CTMC {mean:.5f}"
    except ValueError:  # not a policy of the CTMC
        mean = float(m.mean)
    return mean, float(e.mean), "response", how


def study(runs: int, reps: int, jobs: int, policies: str = "fcfs,msf") -> list[str]:
    """The coverage lines of the module docstring's study."""
    sys.path.insert(0, ".")
    from tests.references import mjqm_ctmc

    wl = workload()
    lines = []
    for policy in policies.split(","):
        mean_t, p90_t, kind, how = _truth(wl, policy, jobs, mjqm_ctmc)
        res = _runs(wl, policy, jax.random.key(1), runs, reps, jobs)
        mean, p90, ok = coverage(res, mean_t, p90_t, kind)
        hw = np.median([float(r.response_mean.half_width) for r in res])
        lines.append(
            f"{policy}: {runs} runs of {reps} x {jobs} jobs at lam {LAM}: mean response "
            f"coverage {mean:.3f} (truth {mean_t:.5f}, median half-width {hw:.4f}), {kind} "
            f"p90 coverage {p90:.3f} (truth {p90_t:.5f}), ok {ok:.2f}; truth: {how}"
        )
    return lines


def run(fast: bool) -> str:
    """The markdown section of ``benchmarks.run`` (fast: 20 runs of 64 x 1,000 jobs)."""
    runs, jobs = (20, 1000) if fast else (200, 4000)
    t0 = time.perf_counter()
    lines = study(runs, 64, jobs)
    head = "## Coverage of the mean and p90 intervals of policy runs (`bench_tails_coverage`)\n\n"
    body = "\n".join(f"* {line}" for line in lines)
    return f"{head}{body}\n\nTarget 93-97%; {time.perf_counter() - t0:.0f} s.\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--reps", type=int, default=64)
    p.add_argument("--jobs", type=int, default=4000)
    p.add_argument("--policies", default="fcfs,msf", help="comma-separated policy names")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    print(*study(args.runs, args.reps, args.jobs, args.policies), sep="\n")
    print(f"elapsed {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
