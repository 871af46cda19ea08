"""``jaxqueue sweep FILE.toml --out DIR``: a grid of multiserver-job runs into one tidy CSV.

The sweep file (TOML or JSON)::

    scenarios = ["five-class-exp", "my-cluster.toml"]   # names or workload files
    loads = [0.3, 0.5, 0.7, 0.9]      # fractions of lambda_c (or lams = [...]: arrival rates)
    methods = ["exact", "simulate"]   # exact, sample, simulate
    policies = ["fcfs", "first-fit"]  # for simulate (default ["fcfs"])
    metrics = ["wait_mean", "response_mean"]   # one figure each (default: both)
    seed = 1                          # optional (--seed overrides it)
    [simulate]                        # sizes: jobs, replications; [sample]: samples
    jobs = 20000

``DIR/sweep.csv`` has one row per point and class plus a row ``class = all``: the point's
``scenario, method, policy, load, lam``, then ``class, wait_mean, wait_mean_low,
wait_mean_high, response_mean, response_mean_low, response_mean_high, status, run``. A row is
appended as soon as its point is done, so an interrupted sweep keeps its finished points and a
rerun skips them (``run`` tells which invocation computed a row). The exact method solves all
the loads of a scenario at once (``jax.vmap``). ``DIR/METRIC.png``: each metric of all jobs
against the load, one line per scenario, method and policy.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time
import zlib

import numpy as np

from ._common import (
    DEFAULT_SEED,
    LOGGER,
    UsageError,
    _HelpFormatter,
    _is_lead_process,
    add_common,
    emit,
    format_table,
    log,
    read_spec,
    workload,
    writable_folder,
)
from ._mjqm_common import command_limit


class _RawHelp(_HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Keeps the layout of the sweep file in the description."""


KEYS = ("scenario", "method", "policy", "load", "lam")
VALUES = ("wait_mean", "response_mean")
COLUMNS = (*KEYS, "class", *(f"{v}{s}" for v in VALUES for s in ("", "_low", "_high")))
COLUMNS += ("status", "run")
METHODS = ("exact", "sample", "simulate")
_FILE_KEYS = {"scenarios", "loads", "lams", "methods", "policies", "metrics", "seed"}
_FILE_KEYS |= set(METHODS)
SIZES = {"simulate": {"jobs": 20_000, "replications": 64}, "sample": {"samples": 2000}}


def read_sweep(path: str) -> dict:
    """The sweep file, checked (one-line ``ValueError`` naming the file and the key)."""
    spec = read_spec(path)
    unknown = sorted(set(spec) - _FILE_KEYS)
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {unknown}; a sweep takes {sorted(_FILE_KEYS)}")
    if ("loads" in spec) == ("lams" in spec):
        raise ValueError(f"{path}: give exactly one of loads (fractions of lambda_c) or lams")
    grid = spec.get("loads", spec.get("lams"))
    if not isinstance(grid, list) or not grid or not all(_positive(x) for x in grid):
        raise ValueError(f"{path}: loads / lams must be a non-empty list of numbers > 0")
    for key in ("scenarios", "methods"):
        if not isinstance(spec.get(key), list) or not spec[key]:
            raise ValueError(f"{path}: {key} must be a non-empty list")
    bad = [m for m in spec["methods"] if m not in METHODS]
    if bad:
        raise ValueError(f"{path}: methods {bad} unknown; choose among {list(METHODS)}")
    spec.setdefault("policies", ["fcfs"])
    spec.setdefault("metrics", list(VALUES))
    if not set(spec["metrics"]) <= set(VALUES):
        raise ValueError(f"{path}: metrics must be among {list(VALUES)}")
    for m in ("simulate", "sample"):
        sizes = spec.get(m, {})
        if not isinstance(sizes, dict) or not set(sizes) <= set(SIZES[m]):
            raise ValueError(f"{path}: [{m}] takes {sorted(SIZES[m])}")
        spec[m] = {**SIZES[m], **sizes}
    spec["fractions"] = "loads" in spec
    spec["grid"] = [float(x) for x in grid]
    return spec


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < math.inf


def _finished(path: str) -> tuple[set, int]:
    """The keys of the points already in the CSV, and the last run number. A point is finished
    when its row ``class = all`` (written last) is whole; the rows of an unfinished point (a
    run killed while writing) are dropped from the file."""
    if not os.path.exists(path):
        return set(), 0
    with open(path, newline="") as f:
        text = f.read()
    whole = text[: text.rfind("\n") + 1]  # a line cut by a kill is not a row
    rows = list(csv.DictReader(whole.splitlines()))
    header = next(csv.reader(whole.splitlines()), [])
    if whole and header != list(COLUMNS):
        raise ValueError(f"{path}: not a sweep CSV of this version (columns differ); move it away")
    point = lambda r: (r["scenario"], r["method"], r["policy"], r["load"])
    done = {point(r) for r in rows if r["class"] == "all" and r.get("run")}
    kept = [r for r in rows if point(r) in done]
    if len(kept) < len(rows) or whole != text:
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(kept)
    return done, max((int(r["run"]) for r in kept), default=0)


def _points(spec: dict) -> list[tuple[str, str, str, float]]:
    """``(scenario, method, policy, x)``: policies apply to simulate, fcfs for the others."""
    out = []
    for sc in spec["scenarios"]:
        for method in spec["methods"]:
            policies = spec["policies"] if method == "simulate" else ["fcfs"]
            out += [(sc, method, p, x) for p in policies for x in spec["grid"]]
    return out


def _key(point) -> tuple[str, str, str, str]:
    sc, method, policy, x = point
    return (sc, method, policy, repr(float(x)))


def _rows(point, lam: float, result: dict, run: int) -> list[list]:
    """The CSV rows of one point from a result dict with ``classes`` (``wait_mean``,
    ``response_mean`` and their ``_ci``), the same for all jobs, and ``status``."""
    sc, method, policy, x = point
    head = [sc, method, policy, repr(float(x)), repr(float(lam))]

    def values(d):
        out = []
        for v in VALUES:
            m = float(d[v])
            ci = d.get(f"{v}_ci")
            lo, hi = (m, m) if ci is None else (ci[0], ci[1])
            out += [m, float("nan") if lo is None else lo, float("inf") if hi is None else hi]
        return out

    rows = [[*head, i, *values(c), result["status"], run] for i, c in enumerate(result["classes"])]
    return rows + [[*head, "all", *values(result), result["status"], run]]


def _exact_results(wl, lams) -> list[dict]:
    """The exact method at all the loads at once (``jax.vmap``), one dict per load."""
    # jax and the models load when the command runs, not at start-up
    import jax
    import jax.numpy as jnp

    # (as jax)
    from ..mjqm import exact

    res = jax.vmap(lambda lam: exact(wl, lam))(jnp.asarray(lams))
    means = np.asarray(wl.mean_service(), dtype=float)
    probs = np.asarray(wl.probs, dtype=float)
    out = []
    for p in range(len(lams)):
        w = np.asarray(res.wait_mean_class[p], dtype=float)
        classes = [{"wait_mean": w[i], "response_mean": w[i] + means[i]} for i in range(w.size)]
        wall = float(res.wait_mean[p])
        stable = bool(np.asarray(res.stable)[p])
        status = "ok" if stable else "unstable"
        out.append(
            {"classes": classes, "wait_mean": wall, "response_mean": wall + probs @ means}
            | {"status": status}
        )
    return out


def _estimate(wl, lam: float, method: str, policy: str, spec: dict, key, limit) -> dict:
    """One simulated or sampled point as a dict with ``classes``, ``wait_mean``,
    ``response_mean`` (and ``_ci``) and ``status``; ``limit``: the policy's stability limit."""
    from ..mjqm import palm_metrics, sample_backward, simulate, simulate_policy  # (as jax)

    if method == "sample":
        S = sample_backward(wl, lam, spec["sample"]["samples"], key=key, limit=limit)
        return palm_metrics(wl, S)
    sizes = {"n_jobs": spec["simulate"]["jobs"], "n_replications": spec["simulate"]["replications"]}
    if policy != "fcfs":
        return simulate_policy(wl, lam, policy, key=key, limit=limit, **sizes).as_dict(wl)
    out = simulate(wl, lam, key=key, limit=limit, **sizes).as_dict()
    for c in out["classes"]:
        c["response_mean"], c["response_mean_ci"] = c["system_time_mean"], c["system_time_mean_ci"]
    shift = out["system_time_mean"] - out["wait_mean"]
    out["response_mean"] = out["system_time_mean"]
    out["response_mean_ci"] = [float(x) + shift for x in out["wait_mean_ci"]]
    return out


def _workloads(spec: dict, path: str) -> dict:
    """The workloads of the sweep file (a name it gives that is unknown is the file's error;
    so is a workload the exact method cannot solve when the sweep asks for it)."""
    from ..mjqm._exact import _check_exponential  # the models load when the command runs

    try:
        wls = {sc: workload(sc) for sc in spec["scenarios"]}
    except UsageError as err:
        raise ValueError(f"{path}: scenarios: {err}") from None
    for sc, wl in wls.items():
        if "exact" in spec["methods"]:
            try:
                _check_exponential(wl)
            except ValueError as err:
                raise ValueError(f"{path}: scenario {sc}: {err}") from None
    return wls


def _compute(spec, todo, wls, seed, write, bar) -> None:
    """Run the points ``todo``, scenario by scenario (the exact loads of a scenario at once),
    calling ``write(point, lam, result)`` as each is done. The stability limit of each
    scenario and policy is computed once (loads are fractions of FCFS's)."""
    # jax and the models load when the command runs, not at start-up
    import jax

    from ..mjqm import UnstableLoadError  # (as jax)

    root = jax.random.key(seed)
    for sc, wl in wls.items():
        mine = [p for p in todo if p[0] == sc]
        if not mine:
            continue
        needed = {p[2] for p in mine if p[1] != "exact"} | (
            {"fcfs"} if spec["fractions"] else set()
        )
        limits = {pol: command_limit(wl, pol, root, tag="sweep") for pol in sorted(needed)}
        lam_c = limits["fcfs"].lambda_c if spec["fractions"] else 1.0
        if lam_c is None:
            raise ValueError(f"sweep: loads of {sc}: {limits['fcfs'].describe()}; give lams")
        exact_pts = [p for p in mine if p[1] == "exact"]
        if exact_pts:
            lams = [p[3] * lam_c for p in exact_pts]
            for p, lam, res in zip(exact_pts, lams, _exact_results(wl, lams), strict=True):
                write(p, lam, res)
                bar.update()
        for p in (p for p in mine if p[1] != "exact"):
            lam = p[3] * lam_c
            key = jax.random.fold_in(root, zlib.crc32(repr(_key(p)).encode()))
            bar.set_postfix_str(f"{sc} {p[1]} {p[2]} {p[3]:g}", refresh=False)
            try:
                res = _estimate(wl, lam, p[1], p[2], spec, key, limits[p[2]])
            except UnstableLoadError:
                nan = float("nan")
                res = {"classes": [], "wait_mean": nan, "response_mean": nan, "status": "unstable"}
            write(p, lam, res)
            bar.update()


def _figures(csv_path: str, spec: dict, out_dir: str) -> list[str]:
    """A figure per metric of all jobs against the load (``METRIC.png``)."""
    # pandas and matplotlib load only for the figures
    from .._tables import pandas
    from ..plot import load_curve

    df = pandas().read_csv(csv_path)
    df = df[df["class"].astype(str) == "all"]
    files = []
    for metric in spec["metrics"]:
        x = "load" if spec["fractions"] else "lam"
        fig = load_curve(df, metric, x=x, by=("scenario", "method", "policy"))
        if spec["fractions"]:
            fig.axes[0].set_xlabel("load (fraction of lambda_c)")
        path = os.path.join(out_dir, f"{metric}.png")
        fig.savefig(path, dpi=120)
        files.append(path)
    return files


def _run(args) -> int:
    # tqdm, pandas and the models load when the command runs, not at start-up
    from tqdm import tqdm

    # (as tqdm)
    from .._tables import pandas
    from ..mjqm.policies import parse_policy

    pandas()  # the figures need it: say so before the work
    spec = read_sweep(args.file)
    for policy in spec["policies"]:
        parse_policy(policy)
    seed = args.seed if args.seed is not None else int(spec.get("seed", DEFAULT_SEED))
    wls = _workloads(spec, args.file)
    out_dir = writable_folder(args.out, "--out")
    csv_path = os.path.join(out_dir, "sweep.csv")
    done, last = _finished(csv_path)
    points = _points(spec)
    todo = [p for p in points if _key(p) not in done]
    run, t0 = last + 1, time.perf_counter()
    log(f"sweep: {len(points)} points, {len(points) - len(todo)} already in {csv_path}")
    statuses: list[str] = []
    quiet = LOGGER.getEffectiveLevel() > 20 or not _is_lead_process()
    with (
        open(csv_path, "a", newline="") as f,
        tqdm(total=len(todo), desc="sweep", file=sys.stderr, disable=quiet) as bar,
    ):
        writer = csv.writer(f)
        if f.tell() == 0:
            writer.writerow(COLUMNS)

        def write(point, lam, result):
            writer.writerows(_rows(point, lam, result, run))
            f.flush()
            statuses.append(result["status"])

        _compute(spec, todo, wls, seed, write, bar)
    figures = _figures(csv_path, spec, out_dir)
    bad = sorted({s for s in statuses if s != "ok"})
    out = {
        "file": args.file, "csv": csv_path, "figures": figures, "points": len(points),
        "computed": len(todo), "skipped": len(points) - len(todo), "run": run, "seed": seed,
        "elapsed_s": time.perf_counter() - t0, "status": bad[0] if bad else "ok",
    }  # fmt: skip
    if bad:
        out["status_reason"] = f"sweep: points with status {', '.join(bad)} in {csv_path}"
    return emit(args, out, _table)


def _table(o: dict) -> str:
    rows = [[k, str(o[k])] for k in ("csv", "points", "computed", "skipped", "run", "status")]
    rows += [["figure", f] for f in o["figures"]]
    return format_table(["sweep", "value"], rows)


def register(top, group) -> None:
    """Add ``jaxqueue sweep``."""
    p = top.add_parser(
        "sweep",
        help="a grid of scenarios x loads x methods x policies into one CSV and figures",
        description=__doc__.split("\n\n", 1)[1].replace("::", ":"),
        formatter_class=_RawHelp,
    )
    p.add_argument("file", metavar="FILE.toml", help="the sweep file (TOML or JSON)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder of sweep.csv and figures")
    add_common(p, strict=True, seed_default=None)
    p.set_defaults(func=_run)
