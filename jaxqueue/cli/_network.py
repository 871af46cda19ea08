"""``jaxqueue network solve``: exact metrics of open, closed and mixed networks of pools."""

from __future__ import annotations

import time

import numpy as np

from ._common import add_common, command, count, emit, format_table, log


def _run_solve(args) -> int:
    """Exact product-form metrics of a network of pools.

    Solve a network given as JSON or TOML: queues (pools, each a list of class server sets,
    global server indices), mu (server rates), routing (class x class), nu (external rates)
    and/or population (closed chain). Prints per-class L, throughput, lam (actual arrival
    rates), T (sojourn per visit), per-pool and per-server idle probabilities.
    """
    # jax and the model load when the command runs, not at start-up
    import jax

    from jaxqueue.networks import read_network, solve, solve_truncated  # (as jax)

    net = read_network(args.spec)
    log(
        f"network: {net.kind}, {net.n_pools} pools, {net.n_classes} classes, "
        f"{net.n_servers} servers" + (f", population {net.population}" if net.population else "")
    )
    t0 = time.perf_counter()
    if args.truncate is not None:
        res = solve_truncated(net, args.truncate)
    else:
        res = solve(net)
    res = jax.block_until_ready(res)
    elapsed = time.perf_counter() - t0
    closed = np.asarray(net.closed)
    out = {
        "kind": net.kind,
        "population": net.population,
        "truncate": args.truncate,
        "L": res.L,
        "throughput": res.throughput,
        "lam": res.lam,
        "visits": res.visits,
        "T": res.T,
        "closed": closed.tolist(),
        "pool_of_class": list(net.class_pool),
        "L_pool": res.L_pool,
        "psi_pool": res.psi_pool,
        "psi_server": res.psi_server,
        "L_total": res.L_total,
        "sojourn": res.sojourn,
        "blocking": res.blocking,
        "log_norm": res.log_norm,
        "device": str(jax.devices()[0]),
        "seconds": elapsed,
    }

    def table(o):
        rows = [
            (i, o["pool_of_class"][i], "closed" if o["closed"][i] else "open")
            + tuple(float(np.asarray(o[k])[i]) for k in ("lam", "L", "T"))
            for i in range(net.n_classes)
        ]
        head = format_table(["class", "pool", "kind", "throughput", "L", "T/visit"], rows)
        pools = format_table(
            ["pool", "L", "P(empty)"],
            [(k, float(o["L_pool"][k]), float(o["psi_pool"][k])) for k in range(net.n_pools)],
        )
        tail = f"L_total = {float(o['L_total']):.6g}"
        if not np.isnan(float(o["sojourn"])):
            tail += f", end-to-end sojourn of an open job = {float(o['sojourn']):.6g}"
        return f"{head}\n\n{pools}\n\n{tail}"

    emit(args, out, table, frame=res.to_frame)
    return 0


def register(top, group) -> None:
    """Add ``jaxqueue network solve``."""
    sub = group("network", "open, closed and mixed networks of multi-server pools")
    p = command(sub, "solve", _run_solve)
    p.add_argument("--spec", required=True, help="network file (JSON or TOML)")
    p.add_argument(
        "--truncate",
        type=count(1),
        default=None,
        metavar="N",
        help="open networks: block external arrivals while N jobs are present (exact)",
    )
    add_common(p, seed=False, csv=True)
