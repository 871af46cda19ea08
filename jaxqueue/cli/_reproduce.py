"""``jaxqueue reproduce NAME``: regenerate a paper's figures (PNG) and their data (CSV).

Each study is a module ``jaxqueue.studies.<module>`` exposing
``run(out_dir: pathlib.Path, *, fast: bool, seed: int) -> dict`` that writes its files under
``out_dir`` and returns a JSON-able summary (at least ``{"files": [...]}``).
"""

from __future__ import annotations

import importlib
import os
import pathlib

from ._common import add_common, emit, log, writable_folder

STUDIES = {
    "bf-recursive": ("jaxqueue.studies.bf_recursive", "bf-recursive Section 6, Figures 9-12"),
    "bf-clusters": ("jaxqueue.studies.bf_clusters", "bf-clusters Section 5, Figures 1-4"),
    "mjsre": ("jaxqueue.studies.mjsre", "mjsre Sections 7.4 and 8"),
}


def register(top, group) -> None:
    p = top.add_parser(
        "reproduce",
        help="regenerate a paper's figures and data",
        description="Regenerate a paper's figures (PNG) and their data (CSV). "
        + "; ".join(f"{k}: {v[1]}" for k, v in STUDIES.items()),
    )
    p.add_argument("study", choices=sorted(STUDIES))
    p.add_argument("--out", default="reproduce", help="output folder (default ./reproduce/STUDY)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--fast", action="store_true", help="small sizes for a CPU (default)")
    size.add_argument("--full", action="store_true", help="the paper's protocol (for a GPU)")
    add_common(p)
    p.set_defaults(func=_run)


def _run(args) -> int:
    import jax  # once the command runs: building the parser does not load jax

    module, source = STUDIES[args.study]
    out = pathlib.Path(writable_folder(os.path.join(args.out, args.study), "--out"))
    log(f"jaxqueue reproduce {args.study} ({source}) on {jax.devices()[0].platform}: {out}")
    summary = importlib.import_module(module).run(out, fast=not args.full, seed=args.seed)
    summary = {"study": args.study, "device": str(jax.devices()[0]), "out": str(out), **summary}
    emit(args, summary)
    return 0
