"""Replay of a one-million-job log (``jaxqueue.traces.replay``): wall and CPU seconds of a
read of the SWF file and of the replay under fcfs, first-fit and easy-backfilling (in
sections side by side, ``traces._split``, the default for a long log), the compile included
(one replay per policy, a fresh process each).

``python -m benchmarks.bench_traces [JOBS] [POLICY ...]`` writes the log (a synthetic log of a
four-class workload on 64 cores at 60% of its ideal load) to a temporary folder and prints one
row per policy for ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _one(path: str, policy: str) -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    from jaxqueue import traces

    w0, c0 = time.perf_counter(), _cpu()
    log = traces.read(path)
    w1, c1 = time.perf_counter(), _cpu()
    r = traces.replay(log, policy)
    w2, c2 = time.perf_counter(), _cpu()
    print(
        f"| {len(log):,} | {policy} | {r.sections} | {w1 - w0:.1f} | {c1 - c0:.1f} | "
        f"{w2 - w1:.1f} | {c2 - c1:.1f} | {r.wait_mean:.4g} | {r.status} |",
        flush=True,
    )


def main(argv: list[str]) -> None:
    if argv[:1] == ["--one"]:
        return _one(argv[1], argv[2])
    n = int(argv[0]) if argv else 1_000_000
    policies = argv[1:] or ["fcfs", "first-fit", "easy-backfilling"]
    import jax

    jax.config.update("jax_enable_x64", True)
    from jaxqueue import traces
    from jaxqueue.dist import Erlang, Exponential, HyperExponential
    from jaxqueue.mjqm import Workload

    laws = [
        Exponential(1.0),
        Erlang(2, 2.0),
        HyperExponential([8.0, 1.0], [0.2, 0.8]),
        Exponential(4.0),
    ]
    wl = Workload(64, [1, 4, 16, 32], [0.5, 0.3, 0.15, 0.05], laws, name="bench-4")
    lam = 0.6 * float(wl.lambda_ideal())
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.swf")
        traces.write_swf(traces.synthetic(wl, lam, n, key=jax.random.key(0)), path)
        print(
            "| jobs | policy | sections | read wall s | read CPU s | replay wall s | "
            "replay CPU s | wait mean | status |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for policy in policies:
            cmd = [sys.executable, "-m", "benchmarks.bench_traces", "--one", path, policy]
            subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main(sys.argv[1:])
