"""``jaxqueue optimize --case NAME [--fast] [--json]``: the dimensioning case studies."""

from __future__ import annotations

from ._common import add_common, command, emit, format_table, log

CASE_NAMES = (
    "capacity-m-model",
    "capacity-random-10",
    "degree-mix",
    "mjqm-max-rate",
    "mjqm-max-rate-exact",
    "mjqm-p99-server-filling",
    "mjqm-speedup",
    "traffic-split",
    "typed-capacity",
)
"""``sorted(jaxqueue.optimize.CASES)``, spelled out so that building the parser imports no
model (``jaxqueue --help`` in a tenth of a second; a test keeps the two equal)."""


def _table(out: dict) -> str:
    rows = [["case", out["case"]], ["cost", out["cost"]], ["targets_met", out["targets_met"]]]
    rows += [[f"param {k}", v] for k, v in out["params"].items()]
    rows += [[f"slack {t}", s] for t, s in zip(out["targets_list"], out["slack"], strict=True)]
    rows += [["device", out["device"]]]
    return format_table(["field", "value"], [[a, str(b)] for a, b in rows])


def _run(args) -> int:
    """Gradient-based dimensioning case studies.

    Run a dimensioning case study (optax on differentiable queue metrics); the answer is
    re-evaluated by an exact engine or an independent simulation.
    """
    from jaxqueue.optimize.cases import run_case  # the models load jax: not at parser build

    def progress(r, info):
        log(
            f"[optimize {args.case}] round {info['round']}/{info['rounds']}: "
            f"cost {info['cost']:.6g}, max log-violation {info['violation']:.3g}"
        )

    out = run_case(args.case, fast=args.fast, progress=progress, seed=args.seed)
    log(f"[optimize {args.case}] targets met: {out['targets_met']} (status {out['status']})")
    emit(args, out, _table)
    return 0


def register(top, group) -> None:
    """Add ``jaxqueue optimize``."""
    p = command(top, "optimize", _run)
    p.add_argument("--case", required=True, choices=CASE_NAMES, help="case study")
    p.add_argument("--fast", action="store_true", help="reduced sizes (seconds)")
    add_common(p, seed_default=0)
