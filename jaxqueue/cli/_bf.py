"""``jaxqueue bf solve``: balanced-fairness metrics of a pool (generic or structured)."""

from __future__ import annotations

import argparse
import json
import math
import os

import numpy as np

from .._tables import bf_frame
from ._common import (
    UsageError,
    add_common,
    command,
    emit,
    format_table,
    log,
    names_a_file,
    nonnegative,
    usage_errors,
)


def register(top, group) -> None:
    """Add ``jaxqueue bf solve``."""
    sub = group("bf", "balanced fairness on a compatibility graph between classes and servers")
    p = command(sub, "solve", run_solve)
    p.add_argument("--pool", default=None, help="file, preset or structure spec")
    p.add_argument("--server-sets", default=None, help="inline JSON list of server lists")
    p.add_argument("--mu", default=None, help="JSON list of capacities (overrides the pool's)")
    rates = p.add_mutually_exclusive_group()
    rates.add_argument("--rho", type=nonnegative, default=None, help="load of the whole pool")
    rates.add_argument("--lam", default=None, help="arrival rates: JSON list or a,b,c")
    p.add_argument(
        "--class-idle", action="store_true", help="also compute class idle probabilities"
    )
    add_common(p, seed=False, csv=True)


def _parse_list(text: str, what: str) -> list:
    text = text.strip()
    try:
        val = json.loads(text if text.startswith("[") else f"[{text}]")
    except json.JSONDecodeError:
        raise UsageError(
            f"{what}: expected comma-separated values (or a JSON list), got {text!r}"
        ) from None
    return val


def _numbers(text: str, what: str, *, zero: bool) -> np.ndarray:
    """The numbers of ``--lam`` (``zero``: >= 0) or ``--mu`` (> 0): a value of the wrong form
    or range on the command line is a usage error, as for every option."""
    rule = "finite numbers >= 0" if zero else "finite numbers > 0"
    val = _parse_list(text, what)
    ok = all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        and (v >= 0 if zero else v > 0)
        for v in val
    )  # fmt: skip
    if not ok:
        raise UsageError(f"{what}: expected comma-separated {rule}, got {text.strip()!r}")
    return np.asarray(val, dtype=float)


def _generic_pool(args: argparse.Namespace):
    # jax and the models load when the command runs, not at start-up
    from jaxqueue.pools import Pool, preset_pool

    file_lam = None
    if args.server_sets is not None:
        sets = _parse_list(args.server_sets, "--server-sets")
        if args.mu is None:
            raise UsageError("--server-sets needs --mu (one capacity per server)")
        pool = Pool(sets, _numbers(args.mu, "--mu", zero=False))
        return pool, file_lam
    spec = args.pool
    if spec.strip().lower().startswith("typed:"):  # before files: the spec holds '/'
        from jaxqueue.pools import parse_typed_spec  # the models load when a command runs

        with usage_errors():  # the spec on the command line, as the structures
            pool = parse_typed_spec(spec)
        return _typed_mu(pool, args), file_lam
    if names_a_file(spec):
        from jaxqueue.pools import read_pool  # the models load when a command runs

        pool, file_lam = read_pool(spec)
        if hasattr(pool, "counts"):
            return _typed_mu(pool, args), file_lam
    else:
        with usage_errors():
            pool = preset_pool(spec)
    if args.mu is not None:
        pool = Pool(pool.server_sets, _numbers(args.mu, "--mu", zero=False))
    return pool, file_lam


def _typed_mu(pool, args):
    """The typed pool with ``--mu`` (one capacity per server of each type) applied."""
    from jaxqueue.pools import TypedPool  # the models load when a command runs

    if args.mu is None:
        return pool
    mu = _numbers(args.mu, "--mu", zero=False)
    if mu.shape != (pool.num_types,):
        raise UsageError(f"--mu has {mu.size} value(s) but the pool has {pool.num_types} types")
    return TypedPool(pool.counts, pool.type_sets, mu)


def _rates(args, pool, file_lam) -> np.ndarray:
    I = pool.num_classes
    if args.lam is not None:
        lam = _numbers(args.lam, "--lam", zero=True)
        if lam.size != I:  # no silent broadcast of one rate to every class
            raise UsageError(
                f"--lam has {lam.size} rate(s) but the pool has {I} classes: give one rate per "
                "class, or --rho for the load of the whole pool"
            )
    elif args.rho is not None:
        caps = pool.capacities() if hasattr(pool, "capacities") else pool.mu
        lam = np.full(I, args.rho * float(np.sum(np.asarray(caps))) / I)
    elif file_lam is not None:
        lam = np.asarray(file_lam, dtype=float)
    else:
        raise UsageError("give the arrival rates: --rho R or --lam a,b,...")
    return lam


def _structured(args):
    from jaxqueue.pools import structured  # the models load when a command runs

    if args.rho is None and args.lam is None:
        raise UsageError("give the arrival rates: --rho R or --lam a,b,...")
    with usage_errors():  # the structure's syntax; its values are the model's to refuse
        kind, params = structured.parse_spec(args.pool)
    lam = None if args.lam is None else _numbers(args.lam, "--lam", zero=True)
    types = len(params.get("d", [])) if kind == "random" else None
    if lam is not None and types is not None and lam.size not in (1, types):
        raise UsageError(
            f"--lam has {lam.size} rate(s) but {args.pool!r} has {types} type(s): give one "
            "total rate or one rate per type"
        )
    lam = None if lam is None else lam.tolist()
    return structured.solve_spec(args.pool, rho=args.rho, lam=lam)


def solve_to_dict(pool, lam, *, class_idle: bool = False) -> dict:
    """Solve a generic pool and return the JSON-able summary used by ``jaxqueue bf solve``."""
    # jax and the models load when the command runs, not at start-up
    import jax

    from jaxqueue.pools import solve, stability  # (as jax)

    st = stability(pool, lam)
    res = solve(pool, lam, class_idle=class_idle or None)
    return {
        **res.metrics(),
        "lam": lam,
        "stability_margin": st.margin,
        "load": st.load,
        "bottleneck_classes": list(st.bottleneck_classes),
        "bottleneck_servers": list(st.bottleneck_servers),
        "num_classes": pool.num_classes,
        "num_servers": pool.num_servers,
        "server_sets": [list(s) for s in pool.server_sets],
        "mu": np.asarray(pool.mu),
        "indexing": "0-based",
        "engine": "generic subset recursion (bf-recursive Theorems 1-2)",
        "device": str(jax.devices()[0]),
    }


def typed_to_dict(pool, lam, *, class_idle: bool = False) -> dict:
    """Solve a typed pool and return the JSON-able summary of ``jaxqueue bf solve``
    (``psi_server`` per type)."""
    # jax and the models load when the command runs, not at start-up
    import jax

    from jaxqueue.pools import solve, stability, typed_estimate  # (as jax)

    st = stability(pool, lam)
    res = solve(pool, lam, class_idle=class_idle or None)
    est = typed_estimate(pool)
    return {
        **res.metrics(),
        "lam": lam,
        "stability_margin": st.margin,
        "load": st.load,
        "bottleneck_classes": list(st.bottleneck_classes),
        "bottleneck_types": list(st.bottleneck_types),
        "num_classes": pool.num_classes,
        "num_servers": pool.num_servers,
        "num_types": pool.num_types,
        "counts": list(pool.counts),
        "type_sets": [list(s) for s in pool.type_sets],
        "mu": np.asarray(pool.mu),
        "server_label": "type",
        "states": est["states"],
        "count_vectors": est["count_vectors"],
        "indexing": "0-based",
        "engine": "typed pool: generic recursion over the 2^T type subsets of the aggregated "
        "pool (bf-recursive Theorems 1-2, eq. (1))",
        "device": str(jax.devices()[0]),
    }


def _table(out: dict) -> str:
    L = np.atleast_1d(np.asarray(out["L"], dtype=float))
    n = L.size
    cols = {
        "lam": out.get("lam"),
        "L": out["L"],
        "T": out["T"],
        "gamma": out.get("gamma"),
        "psi_class": out.get("psi_class"),
    }
    cols = {k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in cols.items() if v is not None}
    cols = {k: v for k, v in cols.items() if v.size == n}
    sets = out.get("server_sets") or out.get("type_sets")
    # structured pools answer per class, per type or for the whole pool (``per``, ``labels``)
    # the first column is 0-based, as in the CSV; a structure's own labels (d=10) beside it
    labels = out.get("labels")
    what = "types" if out.get("type_sets") else "servers"
    headers = [_label(out)] + (["label"] if labels else []) + ([what] if sets else [])
    headers += list(cols)
    rows = []
    for i in range(n):
        row = (
            [i] + ([labels[i]] if labels else []) + ([",".join(map(str, sets[i]))] if sets else [])
        )
        rows.append(row + [float(cols[k][i]) for k in cols])
    text = [format_table(headers, rows)]
    if out.get("psi_server") is not None:
        ps = np.atleast_1d(np.asarray(out["psi_server"], dtype=float))
        if ps.size <= 64:
            text.append(
                format_table(
                    [out.get("server_label", "server"), "psi_server"],
                    [[k, float(v)] for k, v in enumerate(ps)],
                )
            )
    summ = [
        ["psi", out["psi"]],
        ["L_total", out["L_total"]],
        ["T_mean", out["T_mean"]],
        ["busy_servers", out.get("busy_servers")],
        ["stability_margin", out.get("stability_margin")],
    ]
    text.append(
        format_table(
            ["metric", "value"], [[k, float(np.asarray(v))] for k, v in summ if v is not None]
        )
    )
    text.append("(indices are 0-based)")
    return "\n\n".join(text)


def _label(out: dict) -> str:
    """What a row of ``bf solve`` is: a class, a type (random assignment), the whole pool."""
    return "type" if out.get("per") == "type" else "class"


def _frame(out: dict):
    """The CSV of ``bf solve``: the table's rows (0-based first column, the labels)."""
    df = bf_frame(out)
    if _label(out) != "class":
        df = df.rename(columns={"class": _label(out)})
    labels = out.get("labels")
    if labels and len(labels) == len(df):
        df.insert(1, "label", [str(x) for x in labels])
    return df


def run_solve(args: argparse.Namespace) -> int:
    """Exact BF metrics: psi, L, T per class, idle probability per server.

    Exact balanced-fairness metrics of a pool. --pool takes a JSON/TOML file with server_sets
    (0-based server indices per class) and mu, a preset (m-model-sym, m-model-asym), or a
    structure such as random:K=100,d=10, random:K=100,d=6+12,p=0.5+0.5, line:K=100,d=10,
    ring:K=100,d=10, or a typed pool (many servers of few types)
    typed:counts=64+64+32+16,sets=0+1/1+2/2+3/0+3[,mu=...] or a file with counts, type_sets, mu.
    Rates: --rho R (total arrival rate over total capacity, split equally among classes) or
    --lam.
    """
    if args.pool is None and args.server_sets is None:
        raise UsageError("give a pool: --pool FILE|PRESET|STRUCTURE or --server-sets/--mu")
    spec = args.pool
    typed = spec is not None and spec.strip().lower().startswith("typed:")
    if args.server_sets is None and not os.path.isfile(spec) and ":" in spec and not typed:
        res, info = _structured(args)
        out = {
            **res.metrics(),
            "stability_margin": res.stability_margin,
            "structure": spec,
        }
        for k, v in dict(info).items():
            out.setdefault(k, v)
        if out.get("per") == "pool":
            log(f"bf solve: {spec}: metrics of the whole pool ({out.get('method')})")
    else:
        pool, file_lam = _generic_pool(args)
        lam = _rates(args, pool, file_lam)
        if hasattr(pool, "counts"):
            log(
                f"bf solve: {pool.num_classes} classes, {pool.num_servers} servers of "
                f"{pool.num_types} types (2^{pool.num_types} type subsets)"
            )
            out = typed_to_dict(pool, lam, class_idle=args.class_idle)
        else:
            log(f"bf solve: {pool.num_classes} classes, {pool.num_servers} servers")
            out = solve_to_dict(pool, lam, class_idle=args.class_idle)
    emit(args, out, _table, frame=lambda: _frame(out))
    return 0


def demo_text() -> str:
    """The balanced-fairness part of ``jaxqueue demo``: M model and a random 12-server graph."""
    # jax and the models load when the command runs, not at start-up
    from jaxqueue.pools import Pool, m_model, m_model_pool, stability

    parts = []
    pool = m_model_pool()
    lam = np.array([0.9, 0.9])
    out = solve_to_dict(pool, lam, class_idle=True)
    ref = m_model(0.9, 0.9)
    parts.append("M model (bf-clusters Section 5), rho = 0.6, balanced fairness:")
    parts.append(_table(out))
    parts.append(f"closed form (bf-clusters eqs. (10)-(11)) T = {np.asarray(ref.T).round(6)}")
    rng = np.random.default_rng(12)
    K, I = 12, 24
    sets = [sorted(rng.choice(K, size=int(rng.integers(1, 4)), replace=False)) for _ in range(I)]
    pool = Pool([list(map(int, s)) for s in sets], np.ones(K))
    base = rng.uniform(0.5, 1.5, I)
    lam = 0.8 * stability(pool, base).margin * base
    out = solve_to_dict(pool, lam)
    parts.append(
        "random pool: 12 servers, 24 classes of 1-3 servers, at 80% of the stability limit:"
    )
    parts.append(_table(out))
    return "\n\n".join(parts)
