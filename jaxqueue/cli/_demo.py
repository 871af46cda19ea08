"""``jaxqueue demo``: the main job, a tour of every engine on the papers' default scenarios.

It runs the same commands a user would type (each section names its command), so what it
shows is exactly what the command line gives. Minutes on a 2-core laptop CPU.
"""

from __future__ import annotations

import contextlib
import io
import json
import time

import numpy as np

from . import _bf, build_parser
from ._common import add_common, log, to_jsonable

#: (title, command line) of each section after the balanced-fairness ones.
_COMMANDS = [
    (
        "Multiserver-job queue: exact stability limit (saturated QBD; exponential services)",
        "mjqm stability --scenario five-class-exp",
    ),
    (
        "Multiserver-job queue: stability limit by pile growth (mjsre Algorithm 2)",
        "mjqm stability --scenario five-class-exp --pile-growth --rel-tol 0.02",
    ),
    (
        "Multiserver-job queue: exact mean waits (level-dependent QBD), the ground truth below",
        "mjqm exact --scenario five-class-exp --lam 1.5",
    ),
    (
        "Multiserver-job queue: forward MJSRE simulation (mjsre Section 7.4)",
        "mjqm simulate --scenario five-class-exp --lam 1.5 --jobs 20000 --replications 256",
    ),
    (
        "Multiserver-job queue: exact mean waits at lam = 1.35",
        "mjqm exact --scenario five-class-exp --lam 1.35",
    ),
    (
        "Multiserver-job queue: backward sub-perfect samples (mjsre Algorithm 1)",
        "mjqm sample --scenario five-class-exp --lam 1.35 --samples 4000",
    ),
    (
        "Interruption scheduler, M model, bimodal sizes, FCFS (bf-clusters Section 5)",
        "sched simulate --pool m-model-sym --rho 0.7 --law bimodal --m 0 "
        "--replications 16 --jumps 20000 --warmup 20000",
    ),
    (
        "Interruption scheduler, same, m = 5 interruptions per job (close to balanced fairness)",
        "sched simulate --pool m-model-sym --rho 0.7 --law bimodal --m 5 "
        "--replications 16 --jumps 20000 --warmup 20000",
    ),
    (
        "Balanced fairness on the same M model, exact (compare the delays above)",
        "bf solve --pool m-model-sym --rho 0.7",
    ),
    (
        "Dimensioning: cheapest capacities of the M model meeting delay targets (optax)",
        "optimize --case capacity-m-model --fast",
    ),
]


def register(top, group) -> None:
    p = top.add_parser(
        "demo",
        help="the main job: a tour of every engine (minutes on a laptop CPU)",
        description=__doc__,
    )
    add_common(p)
    p.set_defaults(func=_run)


def _section(args, sections: list, title: str, text: str | None = None, result=None) -> None:
    """One section: printed (title, then ``text``), or kept for the JSON object (``--json``)."""
    if args.json:
        sections.append({"title": title, "text": text, "result": result})
        return
    print(f"\n{'=' * 100}\n{title}\n{'=' * 100}", flush=True)
    if text is not None:
        print(text, flush=True)


def _command(parser, command: str, args) -> tuple[int, dict | None]:
    """Run one command of the tour with the demo's ``--seed``: its exit status and, under
    ``--json``, its JSON object (its table is printed otherwise)."""
    sub = parser.parse_args(command.split() + (["--json"] if args.json else []))
    if hasattr(sub, "seed"):
        sub.seed = args.seed
    if not args.json:
        return sub.func(sub), None
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        status = sub.func(sub)
    return status, json.loads(buffer.getvalue())


def _network_demo() -> str:
    # jax and the models load when the command runs, not at start-up
    from jaxqueue.networks import Network, solve

    # A CPU pool (servers 0-3) then a GPU pool (servers 4-5); 30% of GPU jobs go back to the CPU.
    net = Network(
        queues=[[[0, 1, 2], [1, 2, 3]], [[4, 5], [5]]],
        mu=np.array([1.0, 1.0, 1.0, 1.0, 2.0, 1.5]),
        routing=np.array(
            [[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0], [0.3, 0.0, 0.0, 0.0], [0.0, 0.3, 0.0, 0.0]]
        ),
        nu=np.array([1.0, 0.6, 0.0, 0.0]),
    )
    res = solve(net)
    lines = ["class  pool  throughput        L   T/visit"]
    for i in range(4):
        lines.append(
            f"{i:>5}  {net.class_pool[i]:>4}  {float(res.lam[i]):>10.4f}  "
            f"{float(res.L[i]):>7.4f}  {float(res.T[i]):>8.4f}"
        )
    lines.append(f"end-to-end sojourn per external job: {np.asarray(res.sojourn).round(4)}")
    return "\n".join(lines)


def _run(args) -> int:
    # jax and the models load when the command runs, not at start-up
    import jax

    from ..studies.bf_recursive import demo_text as structured_demo  # (as jax)

    t_start = time.perf_counter()
    device = f"{jax.devices()[0].platform} ({len(jax.devices())} device(s))"
    if not args.json:
        print(f"jaxqueue demo on {device}")
    sections: list = []
    title = "Balanced fairness, recursion over server subsets (bf-recursive Theorems 1-2)"
    _section(args, sections, title, _bf.demo_text())
    title = "Structured pools, exact in polynomial time (bf-recursive Sections 4-5)"
    _section(args, sections, title, structured_demo())
    title = "Open network of pools: CPU pool -> GPU pool with feedback (bf-networks)"
    _section(args, sections, title, _network_demo())

    parser = build_parser()
    for title, command in _COMMANDS:
        t0 = time.perf_counter()
        _section(args, sections, f"{title}\n$ jaxqueue {command}")
        status, result = _command(parser, command, args)
        if args.json:
            sections[-1].update(title=title, command=f"jaxqueue {command}", result=result)
        if status:
            return status
        log(f"[demo] '{command}' took {time.perf_counter() - t0:.1f} s")
    elapsed = time.perf_counter() - t_start
    log(f"[demo] total {elapsed:.1f} s")
    if args.json:
        out = {"device": device, "seed": args.seed, "sections": sections, "elapsed_s": elapsed}
        print(json.dumps(to_jsonable(out)))
    return 0
