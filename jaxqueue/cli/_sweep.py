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

``DIR/sweep.csv`` has one row per point and class (0-based) plus a row ``class = all``: the
point's ``scenario, method, policy, load, lam``, then ``class, cores, wait_mean, wait_mean_low,
wait_mean_high, response_mean, response_mean_low, response_mean_high, status, run``. A row is
appended as soon as its point is done, so an interrupted sweep keeps its finished points and a
rerun skips them (``run`` tells which invocation computed a row; a row cut short by a kill is
repaired). ``DIR/sweep-manifest.json`` records what decides a row's numbers (seed, sizes, loads
or lams, each workload file's content, the package version): a rerun that differs in any of
them is refused (``--fresh`` starts over); an edited grid keeps the points still in the file
and drops the others. The exact method (exponential or phase-type laws) solves all the
loads of a scenario at once (``jax.vmap``). ``DIR/METRIC.png``: each metric of all jobs
against the load, one line per scenario, method and policy of the file.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import math
import os
import sys
import time
import zlib

import numpy as np

from .. import __version__
from ._common import (
    DEFAULT_SEED,
    LOGGER,
    STATUSES,
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
NUMBERS = tuple(f"{v}{s}" for v in VALUES for s in ("", "_low", "_high"))
COLUMNS = (*KEYS, "class", "cores", *NUMBERS, "status", "run")
MANIFEST = "sweep-manifest.json"
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


def _manifest(spec: dict, path: str, seed: int) -> dict:
    """What decides the numbers of a row: the package version, the seed, the sizes, loads or
    lams, and each workload file's content (a preset comes with the version); and, for the
    record, the sweep file's text."""
    scenarios = {}
    for sc in spec["scenarios"]:
        if os.path.isfile(sc):
            with open(sc, "rb") as f:
                scenarios[sc] = hashlib.sha256(f.read()).hexdigest()
        else:
            scenarios[sc] = "preset"
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return {
        "jaxqueue": __version__, "seed": seed, "grid": "loads" if spec["fractions"] else "lams",
        "simulate": spec["simulate"], "sample": spec["sample"], "scenarios": scenarios,
        "file": path, "content": text,
    }  # fmt: skip


def _mismatch(old: dict, new: dict) -> str | None:
    """How the manifest of the rows in ``--out`` differs from this run's (``None``: it does
    not, in anything that decides a row's numbers)."""
    if old.get("jaxqueue") != new["jaxqueue"]:
        return f"computed by jaxqueue {old.get('jaxqueue')}, this is {new['jaxqueue']}"
    if old.get("seed") != new["seed"]:
        return f"computed with seed {old.get('seed')}, this run has seed {new['seed']}"
    if old.get("grid") != new["grid"]:
        return f"computed for {old.get('grid')}, this sweep file gives {new['grid']}"
    for m in SIZES:
        for k, v in new[m].items():
            if (old.get(m) or {}).get(k) != v:
                was = (old.get(m) or {}).get(k)
                return f"computed with [{m}] {k} = {was}, this sweep file has {k} = {v}"
    for sc, digest in new["scenarios"].items():
        if (old.get("scenarios") or {}).get(sc, digest) != digest:
            return f"computed for another content of the workload file {sc}"
    return None


def _check_manifest(out_dir: str, manifest: dict, fresh: bool) -> None:
    """Refuse (one line) rows in ``out_dir`` computed otherwise than this run would, start
    over under ``--fresh``, then record this run's manifest."""
    csv_path, path = os.path.join(out_dir, "sweep.csv"), os.path.join(out_dir, MANIFEST)
    if fresh:
        for name in (csv_path, path):
            if os.path.exists(name):
                os.remove(name)
    has_rows = os.path.exists(csv_path) and os.path.getsize(csv_path) > 0
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                old = json.load(f)
            if not isinstance(old, dict):
                raise ValueError
        except ValueError:
            raise ValueError(
                f"{path}: not a sweep manifest; use --fresh to start over or another --out"
            ) from None
        why = _mismatch(old, manifest) if has_rows else None
        if why:
            raise ValueError(
                f"{csv_path}: its rows were {why}; use --fresh to start over or another --out"
            )
    elif has_rows:
        raise ValueError(
            f"{csv_path}: no {MANIFEST} beside it says how its rows were computed; use --fresh "
            "to start over or another --out"
        )
    _write_atomic(path, json.dumps(manifest, indent=1) + "\n")


def _write_atomic(path: str, text: str) -> None:
    """Replace ``path`` by ``text`` whole or not at all (a kill leaves the old file)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _bad_row(row: list[str]) -> str | None:
    """Why a whole line of the CSV is not a sweep row (``None``: it is one)."""
    if len(row) != len(COLUMNS):
        return f"{len(row)} fields, a row has {len(COLUMNS)}"
    r = dict(zip(COLUMNS, row, strict=True))
    try:
        for k in ("load", "lam", *NUMBERS):
            float(r[k])
        if r["class"] != "all":
            int(r["class"])
        if r["run"] and int(r["run"]) < 1:
            raise ValueError
    except ValueError:
        return "a number that does not read"
    if r["status"] not in STATUSES or r["method"] not in METHODS:
        return f"status {r['status']!r} or method {r['method']!r} unknown"
    return None


def _finished(path: str, keys: set, file: str) -> tuple[set, int]:
    """The keys of the points already in the CSV, and the last run number. A point is finished
    when its row ``class = all`` (written last) is whole. The file is repaired in place (and
    says so): a line cut by a kill, the rows of an unfinished point, and the points no longer
    in the sweep file ``file`` (``keys``: those it has) leave it. A damaged whole line is
    refused in one line naming it."""
    if not os.path.exists(path):
        return set(), 0
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        text = f.read()
    whole = text[: text.rfind("\n") + 1]  # a line cut by a kill is not a row
    lines = list(csv.reader(whole.splitlines()))
    if not lines:
        return set(), 0
    if lines[0] != list(COLUMNS):
        raise ValueError(f"{path}: not a sweep CSV of this version (columns differ); use --fresh")
    for n, row in enumerate(lines[1:], start=2):
        why = _bad_row(row)
        if why:
            raise ValueError(
                f"{path} line {n}: not a sweep row ({why}); remove the line or use --fresh"
            )
    rows = [dict(zip(COLUMNS, row, strict=True)) for row in lines[1:]]
    point = lambda r: (r["scenario"], r["method"], r["policy"], r["load"])
    done = {point(r) for r in rows if r["class"] == "all" and r["run"]}
    gone = sorted(done - keys)
    kept = [r for r in rows if point(r) in done and point(r) in keys]
    unfinished = {point(r) for r in rows} - done
    if whole != text or unfinished:
        log(
            f"sweep: repaired {path}: removed "
            + ("a row cut short" if whole != text else "")
            + (" and " if whole != text and unfinished else "")
            + (f"the rows of {len(unfinished)} unfinished point(s)" if unfinished else "")
        )
    if gone:
        shown = ", ".join(" ".join(k) for k in gone[:3]) + (", ..." if len(gone) > 3 else "")
        log(f"sweep: dropped {len(gone)} point(s) no longer in {file} from {path}: {shown}")
    if len(kept) < len(rows) or whole != text:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(kept)
        _write_atomic(path, buffer.getvalue())
    return done & keys, max((int(r["run"]) for r in kept), default=0)


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


def _rows(point, lam: float, result: dict, run: int, cores: list[str]) -> list[list]:
    """The CSV rows of one point from a result dict with ``classes`` (``wait_mean``,
    ``response_mean`` and their ``_ci``), the same for all jobs, and ``status``; ``cores``:
    each class's cores (``a+b`` for several resource types)."""
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

    rows = [
        [*head, i, cores[i], *values(c), result["status"], run]
        for i, c in enumerate(result["classes"])
    ]
    return rows + [[*head, "all", "", *values(result), result["status"], run]]


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
    from ..mjqm._exact import check_exact  # the models load when the command runs

    try:
        wls = {sc: workload(sc) for sc in spec["scenarios"]}
    except UsageError as err:
        raise ValueError(f"{path}: scenarios: {err}") from None
    for sc, wl in wls.items():
        if "exact" in spec["methods"]:
            try:
                check_exact(wl)
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

    df = pandas().read_csv(csv_path, dtype={"class": str, "load": str})
    df = df[df["class"] == "all"]
    df = df[df["load"].isin({repr(float(x)) for x in spec["grid"]})]  # the file's points
    df = df[df["scenario"].isin(spec["scenarios"])].assign(load=lambda d: d["load"].astype(float))
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
    _check_manifest(out_dir, _manifest(spec, args.file, seed), args.fresh)
    points = _points(spec)
    done, last = _finished(csv_path, {_key(p) for p in points}, args.file)
    todo = [p for p in points if _key(p) not in done]
    run, t0 = last + 1, time.perf_counter()
    log(f"sweep: {len(points)} points, {len(points) - len(todo)} already in {csv_path}")
    statuses: list[str] = []
    quiet = LOGGER.getEffectiveLevel() > 20 or not _is_lead_process()
    with (
        open(csv_path, "a", newline="") as f,
        tqdm(total=len(todo), desc="sweep", file=sys.stderr, disable=quiet) as bar,
    ):
        if f.tell() == 0:
            csv.writer(f).writerow(COLUMNS)
        cores = {sc: ["+".join(map(str, c)) for c in wl.cores] for sc, wl in wls.items()}

        def write(point, lam, result):
            buffer = io.StringIO()  # a point's rows in one write: a kill rarely cuts them
            csv.writer(buffer).writerows(_rows(point, lam, result, run, cores[point[0]]))
            f.write(buffer.getvalue())
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
    p.add_argument(
        "--fresh",
        action="store_true",
        help="start over: remove the rows (and manifest) of an earlier sweep in --out",
    )
    add_common(p, strict=True, seed_default=None)
    p.set_defaults(func=_run)
