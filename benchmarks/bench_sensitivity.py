"""Coverage of the 95% intervals of :func:`jaxqueue.mjqm.sensitivity` against the exact
derivatives (``jax.grad`` of the QBD, :func:`jaxqueue.mjqm.exact_sensitivity`), and a table of
bias and cost per method.

Cases: ``five-class-exp`` and ``two-class-256`` (its rare all-core class) at 0.5 and 0.8
``lambda_c``, FCFS, mean wait. Independent runs (keys ``1000 ..``) per case; for each derivative
(``lam``, every ``scale_i``, every ``logits_i``) the share of runs whose interval holds the exact
value (target 93-97%), and the runs that say ``ok`` while missing by more than three
half-widths. Methods for the bias table: pathwise from backward samples (the default),
pathwise from an empty start, CRN central differences, the score function (logits).

    python -m benchmarks.bench_sensitivity --runs 20 --jobs 4000 --replications 64
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from jaxqueue.mjqm import exact_lambda_c, exact_sensitivity, sensitivity
from jaxqueue.scenarios import get

CASES = (
    ("five-class-exp", 0.5),
    ("five-class-exp", 0.8),
    ("two-class-256", 0.5),
    ("two-class-256", 0.8),
)

VARIANTS = {
    "backward": dict(start="backward"),
    "empty": dict(start="empty"),
    "crn": dict(start="backward", differences=True),
}


def _flat(d: dict) -> dict:
    return {
        f"{k}[{i}]" if np.ndim(v) else k: float(x)
        for k, v in d.items()
        if k != "value"
        for i, x in enumerate(np.atleast_1d(v))
    }


def coverage(name, load, runs, *, variant="backward", n_jobs=4000, n_replications=64, first=1000):
    """Per derivative: runs covering the exact value, ok runs missing by > 3 half-widths, the
    mean error (bias) and its standard error; seconds per run after the first (compilation)."""
    wl = get(name)
    lam = load * float(exact_lambda_c(wl))
    ex = _flat(exact_sensitivity(wl, lam))
    rows = {k: {"cover": 0, "bad_ok": 0, "err": []} for k in ex}
    methods, ok, secs = {}, 0, []
    for r in range(runs):
        t0 = time.perf_counter()
        res = sensitivity(
            wl,
            lam,
            key=jax.random.key(first + r),
            n_jobs=n_jobs,
            n_replications=n_replications,
            **VARIANTS[variant],
        )
        secs.append(time.perf_counter() - t0)
        ok += res.status == "ok"
        for k, e in res.derivatives.items():
            methods[k] = res.methods[k]
            m, lo, hi = (np.atleast_1d(np.asarray(x)) for x in (e.mean, e.low, e.high))
            for i in range(m.size):
                key = f"{k}[{i}]" if k != "lam" else k
                row, truth = rows[key], ex[key]
                row["cover"] += bool(lo[i] <= truth <= hi[i])
                row["err"].append(float(m[i] - truth))
                hw = (hi[i] - lo[i]) / 2
                row["bad_ok"] += bool(res.status == "ok" and abs(m[i] - truth) > 3 * hw)
    out = {}
    for k, row in rows.items():
        err = np.asarray(row["err"])
        out[k] = {
            "exact": ex[k],
            "coverage": row["cover"] / runs,
            "bad_ok": row["bad_ok"],
            "bias": float(err.mean()),
            "bias_se": float(err.std(ddof=1) / np.sqrt(runs)) if runs > 1 else float("nan"),
            "method": methods[k.split("[")[0]],
        }
    later = secs[1:] or secs
    return {
        "case": f"{name}@{load}",
        "variant": variant,
        "runs": runs,
        "ok": ok,
        "jobs": n_jobs,
        "replications": n_replications,
        "first_s": secs[0],
        "run_s": float(np.median(later)),
        "derivatives": out,
    }


def main(argv=None):
    jax.config.update("jax_enable_x64", True)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=4000)
    ap.add_argument("--replications", type=int, default=64)
    ap.add_argument("--cases", default=",".join(f"{n}@{l}" for n, l in CASES))
    ap.add_argument("--variants", default="backward")
    args = ap.parse_args(argv)
    for case in args.cases.split(","):
        name, load = case.split("@")
        for v in args.variants.split(","):
            res = coverage(
                name,
                float(load),
                args.runs,
                variant=v,
                n_jobs=args.jobs,
                n_replications=args.replications,
            )
            print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
