"""Run every benchmark and write ``benchmarks/RESULTS.md``.

Usage: ``python -m benchmarks.run [--fast] [--only NAME ...]``. Each ``benchmarks/bench_*.py``
exposes ``run(fast: bool) -> str`` returning a markdown section; timings separate compile time
from run time and compare against a baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import pathlib
import platform
import sys
import time

HERE = pathlib.Path(__file__).parent
BENCHES = [p.stem for p in sorted(HERE.glob("bench_*.py"))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fast", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--only", nargs="*", default=None, help="bench names, e.g. bench_pools")
    parser.add_argument("--out", default=str(HERE / "RESULTS.md"))
    args = parser.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", True)
    names = args.only or BENCHES
    dev = jax.devices()[0]
    header = [
        "# Benchmark results",
        "",
        f"Written by `python -m benchmarks.run{' --fast' if args.fast else ''}` on "
        f"{datetime.date.today()}: device `{dev.platform}` ({dev.device_kind}), "
        f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}, "
        f"jax {jax.__version__}, Python {platform.python_version()}.",
        "",
    ]
    out = pathlib.Path(args.out)
    # With --only, the other benchmarks' sections of an existing results file are kept.
    sections = _read_sections(out) if args.only and out.exists() else {}
    for name in names:
        t0 = time.perf_counter()
        print(f"[benchmarks] {name} ...", file=sys.stderr, flush=True)
        mod = importlib.import_module(f"benchmarks.{name}")
        body = mod.run(fast=args.fast).rstrip() + "\n"
        stamp = f"_Section measured on {datetime.date.today()}, device `{dev.platform}`._\n"
        sections[name] = f"{_MARK}{name} -->\n{body}\n{stamp}"
        print(f"[benchmarks] {name} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    # Sections of no benchmark module (the device rows, written by hand) are kept at the end.
    ordered = [sections[n] for n in BENCHES if n in sections]
    ordered += [v for n, v in sections.items() if n not in BENCHES]
    text = "\n".join(header) + "\n" + "\n".join(ordered)
    out.write_text(text)
    print(text)
    return 0


_MARK = "<!-- bench:"


def _read_sections(path: pathlib.Path) -> dict[str, str]:
    """The sections of an existing results file, by benchmark name."""
    parts = path.read_text().split(_MARK)[1:]
    return {p.split(" -->", 1)[0]: _MARK + p.rstrip() + "\n" for p in parts}


if __name__ == "__main__":
    sys.exit(main())
