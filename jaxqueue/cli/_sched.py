"""``jaxqueue sched simulate``: the interruption scheduler of ``bf-clusters`` Algorithm 1.

Example::

    jaxqueue sched simulate --pool m-model-sym --rho 0.8 --law bimodal --m 1 --json
    jaxqueue sched simulate --pool random:S=100,d=2 --rho 0.7 --law zipf --m 0 --json
"""

from __future__ import annotations

import time

import numpy as np

from ._common import (
    UsageError,
    add_common,
    add_level,
    command,
    count,
    emit,
    format_table,
    log,
    names_a_file,
    nonnegative,
    on_bar,
    positive,
    usage_errors,
)

LAWS = ("exp", "bimodal", "hyperexp", "zipf", "erlang3")
MAX_QUEUE = 8192
"""Default largest job buffer of ``sched simulate`` (``--max-queue-size``)."""


def parse_pool(spec: str):
    """A pool from ``--pool``: a preset (``m-model-sym``, ``m-model-asym``), a random-assignment
    structure ``random:S=100,d=2`` (``K`` is accepted for ``S``; optional ``mu``), or a JSON /
    TOML file with ``server_sets`` (0-based) and ``mu``.

    Raises:
        ValueError: unknown preset, malformed structure, unreadable file.
    """
    # jax and the models are imported by the commands that run, not at start-up
    from jaxqueue.pools import read_pool_fields
    from jaxqueue.sched import ClassAssignment, RandomAssignment, parse_random_spec

    if spec.startswith("random:"):
        with usage_errors():  # the structure on the command line, and the pool it names
            S, d, mu = parse_random_spec(spec)
            return RandomAssignment(S, d, mu=mu)
    if spec in ("m-model-sym", "m-model-asym"):
        from jaxqueue.pools import preset_pool  # the models load when a command runs

        pool = preset_pool(spec)
        return ClassAssignment(pool.server_sets, np.asarray(pool.mu, dtype=float))
    if not names_a_file(spec):
        raise UsageError(
            f"--pool {spec!r}: not a preset (m-model-sym, m-model-asym), a random:S=..,d=.. "
            "structure or a JSON/TOML file"
        )
    sets, mu, _ = read_pool_fields(spec)
    return ClassAssignment(sets, mu)


def loads(pool, rho: float) -> np.ndarray:
    """Arrival rates for a total load ``rho`` (total arrival / total capacity), split equally
    among the classes (one total rate for random assignment)."""
    from jaxqueue.sched import RandomAssignment, as_assignment  # loaded when a command runs

    if not (np.isfinite(rho) and rho > 0):
        raise ValueError(f"--rho must be > 0, got {rho}")
    total = rho * float(np.sum(as_assignment(pool).mu))
    if isinstance(pool, RandomAssignment):
        return np.array([total])
    return np.full(pool.n_classes, total / pool.n_classes)


def register(top, group) -> None:
    sched = group("sched", "the interruption scheduler (FCFS .. balanced fairness), simulated")
    p = command(sched, "simulate", _run)
    p.add_argument(
        "--pool",
        required=True,
        help="m-model-sym | m-model-asym | random:S=..,d=.. "
        "| FILE (JSON/TOML with server_sets, mu)",
    )
    p.add_argument("--rho", type=positive, required=True, help="total arrival / total capacity")
    p.add_argument("--law", default="exp", choices=LAWS, help="job-size law (rescaled to mean 1)")
    p.add_argument(
        "--m", type=nonnegative, default=0.0, help="mean interruptions per job (0: FCFS)"
    )
    p.add_argument("--replications", type=count(2), default=20, help="independent replications")
    p.add_argument(
        "--jumps",
        "--events",
        dest="jumps",
        type=count(1),
        default=100_000,
        help="measured jumps per replication",
    )
    p.add_argument("--warmup", type=count(0), default=None, help="warm-up jumps (default: --jumps)")
    p.add_argument(
        "--queue-size",
        type=count(1),
        default=128,
        help="initial job buffer (jobs in system held; doubled on overflow up to --max-queue-size)",
    )
    p.add_argument(
        "--max-queue-size",
        type=count(1),
        default=None,
        help=f"largest job buffer (default: {MAX_QUEUE}, or --queue-size if larger)",
    )
    add_level(p)
    add_common(p, strict=True, csv=True)


def _run(args) -> int:
    """Simulate Algorithm 1 of bf-clusters (random interruptions on FCFS servers).

    Simulate FCFS servers pooling on the oldest compatible job, each busy server interrupting
    its job at rate C_s/theta (m = sigma/theta interruptions per job; m = 0 is FCFS). Per-class
    mean delay and service rate (bf-clusters eq. (9)) with confidence intervals across
    replications. Job sizes have mean 1.
    """
    # jax and the models load when the command runs, not at start-up
    import jax

    from jaxqueue.dist import get_law  # (as jax)
    from jaxqueue.sched import RandomAssignment, simulate  # (as jax)

    pool = parse_pool(args.pool)
    lam = loads(pool, args.rho)
    law = get_law(args.law, mean=1.0)
    warmup = args.jumps if args.warmup is None else args.warmup
    cap = max(MAX_QUEUE, args.queue_size) if args.max_queue_size is None else args.max_queue_size
    if cap < args.queue_size:
        raise UsageError(
            f"--max-queue-size {cap} is below --queue-size {args.queue_size}: give a larger one"
        )
    log(
        f"sched simulate: {args.replications} replications x {args.jumps} jumps "
        f"(+{warmup} warm-up) on {jax.devices()[0]}"
    )
    t0 = time.perf_counter()
    res = simulate(
        pool,
        lam,
        law,
        m=args.m,
        key=jax.random.key(args.seed),
        replications=args.replications,
        jumps=args.jumps,
        warmup=warmup,
        queue_size=args.queue_size,
        max_queue_size=cap,
        level=args.level,
        progress=on_bar(),
    )
    out = {
        "pool": args.pool,
        "rho": args.rho,
        "lam": lam,
        "law": args.law,
        "m": args.m,
        "delay": res.delay_all,
        "delay_ci": [res.delay_all_low, res.delay_all_high],
        "service_rate": 1.0 / res.delay_all,
        "service_rate_ci": [1.0 / res.delay_all_high, 1.0 / res.delay_all_low],
        "level": res.level,
        "replications": res.replications,
        "jumps": res.jumps,
        "warmup": res.warmup,
        "queue_size": int(res.queue_size),
        "n_max": res.n_max,
        "overflow": res.overflow,
        "interruptions_per_job": res.interruptions_per_job,
        "busy_capacity": res.busy,
        "jumps_per_s": res.jumps_per_s,
        "elapsed_s": time.perf_counter() - t0,
        "device": str(jax.devices()[0]),
        "status": res.status,
        "drift": float(np.ravel(res.drift)[0]),
        "n_eff": float(np.ravel(res.n_eff)[0]),
    }
    if res.status != "ok":
        out["status_reason"] = status_reason(res)
    if not isinstance(pool, RandomAssignment):
        out["classes"] = [
            {
                "lam": lam[i],
                "delay": res.delay[i],
                "delay_ci": [res.delay_low[i], res.delay_high[i]],
                "service_rate": res.service_rate[i],
                "service_rate_ci": [res.service_rate_low[i], res.service_rate_high[i]],
                "L": res.L[i],
            }
            for i in range(len(lam))
        ]
    return emit(args, out, _table, frame=res.to_frame)


def status_reason(res) -> str:
    """Why a result is not ok: the dropped arrivals of an "overflow", or the diagnostics of a
    "nonstationary" or "unconverged" result against the rules for "ok"
    (``jaxqueue.sched._simulate``)."""
    from jaxqueue.sched import MIN_EFFECTIVE, MIN_REPLICATIONS  # loaded when a command runs

    if res.status == "overflow":
        return (
            f"sched simulate: the jobs in system reached the job buffer of "
            f"{int(res.queue_size)} jobs (the largest, --max-queue-size; {int(res.overflow)} "
            f"arrivals dropped, at most {int(np.max(res.n_max))} jobs held): raise "
            "--max-queue-size, or lower --rho or the run length (--jumps, --warmup) that lets "
            "the queue grow this long"
        )
    drift, n_eff = float(np.ravel(res.drift)[0]), float(np.ravel(res.n_eff)[0])
    return (
        f"sched simulate: the number of jobs changed by {drift:+.1%} from the first to the "
        f"second half of the run, {n_eff:.3g} effective observations per replication, "
        f"{res.replications} "
        f"replications (ok needs no significant growth above 5%, >= {MIN_EFFECTIVE:g} effective "
        f"observations and >= {MIN_REPLICATIONS} replications); raise --warmup and --jumps, "
        "--replications, or lower --rho"
    )


def _table(out: dict) -> str:
    rows = [
        (
            str(i),
            c["delay"],
            f"[{c['delay_ci'][0]:.4g}, {c['delay_ci'][1]:.4g}]",
            c["service_rate"],
        )
        for i, c in enumerate(out.get("classes", []))
    ]
    rows.append(
        (
            "all",
            float(out["delay"]),
            f"[{float(out['delay_ci'][0]):.4g}, {float(out['delay_ci'][1]):.4g}]",
            float(out["service_rate"]),
        )
    )
    return format_table(["class", "delay", "delay CI", "service rate"], rows)
