"""Issue 14's acceptance table: ``mjqm sample`` and ``mjqm simulate`` with default options on
``two-class-256`` at ``lam = k 0.1 lambda_c`` and on ``five-class-exp`` at 0.97 ``lambda_c``,
against the exact mean wait (:func:`jaxqueue.mjqm.exact`).

Each row runs the command line as a user would (a subprocess, ``--json``, default options and
seed), and reports the estimate, its 95% interval, the status, whether the interval holds the
exact value, the relative error and the wall time (compilation included). Targets (2-core
CPU): ``sample`` ok and within 2% (or covering) in < 60 s for k <= 7, and for k = 8, 9 the same
within 10 minutes or a non-ok status; ``simulate`` ok and covering in < 2 minutes for k <= 5,
the same or a non-ok status beyond. A row that says ok and misses is a FAIL whatever the time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import jax

from jaxqueue.mjqm import exact, exact_lambda_c
from jaxqueue.scenarios import get


def _cli(cmd: str, name: str, lam: float) -> tuple[dict | None, float]:
    argv = [sys.executable, "-m", "jaxqueue", "mjqm", cmd, "--scenario", name]
    argv += ["--lam", repr(lam), "--json"]
    env = dict(os.environ, JAXQUEUE_NO_CACHE="1")
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    secs = time.perf_counter() - t0
    try:
        return json.loads(out.stdout), secs
    except json.JSONDecodeError:
        return None, secs


def _row(cmd, name, frac, lc, fast_limit, slow_limit, fast_k) -> str:
    lam = frac * lc
    truth = float(exact(get(name), lam).wait_mean)
    o, secs = _cli(cmd, name, lam)
    if o is None:
        head = f"| {cmd} | {name} | {frac:.2f} | {truth:.5g}"
        return f"{head} | no answer | - | - | - | {secs:.0f} | FAIL |"
    lo, hi = o["wait_mean_ci"]
    covers = lo <= truth <= hi
    rel = (o["wait_mean"] - truth) / truth
    good = covers or abs(rel) <= 0.02
    limit = fast_limit if fast_k else slow_limit
    if o["status"] == "ok":
        verdict = (
            "PASS" if good and secs < limit else ("FAIL (slow)" if good else "FAIL (ok, wrong)")
        )
    else:
        verdict = "FAIL (non-ok)" if fast_k else "PASS (non-ok)"
        verdict = verdict if secs < slow_limit else verdict + ", slow"
    return (
        f"| {cmd} | {name} | {frac:.2f} | {truth:.5g} | {o['wait_mean']:.5g} [{lo:.5g}, {hi:.5g}] "
        f"| {o['status']} | {'yes' if covers else 'no'} | {rel:+.1%} | {secs:.0f} | {verdict} |"
    )


def run(fast: bool) -> str:
    two, five = "two-class-256", "five-class-exp"
    lc2, lc5 = float(exact_lambda_c(get(two))), float(exact_lambda_c(get(five)))
    ks = [1, 5, 7] if fast else list(range(1, 10))
    rows = []
    for k in ks:
        rows.append(_row("sample", two, k / 10, lc2, 60, 600, k <= 7))
    rows.append(_row("sample", five, 0.97, lc5, 60, 600, False))
    for k in ks:
        rows.append(_row("simulate", two, k / 10, lc2, 120, 600, k <= 5))
    rows.append(_row("simulate", five, 0.97, lc5, 120, 600, False))
    dev = jax.devices()[0]
    return (
        "\n".join(
            [
                "## Estimates against the exact solver, default options (`bench_honesty`)",
                "",
                f"Device `{dev.platform}`; the command line in a subprocess, compilation cache "
                "off, wall time. " + ("**fast mode** (k = 1, 5, 7)." if fast else "k = 1 .. 9."),
                "All rows use the command's default seed, so the rows of one command share their "
                "random numbers (counter-based inputs) and their errors are correlated across "
                "loads.",
                "",
                "| command | scenario | lam / lambda_c | exact | estimate [95% CI] | status "
                "| covers | error | s | target |",
                "|---|---|---|---|---|---|---|---|---|---|",
                *rows,
            ]
        )
        + "\n"
    )
