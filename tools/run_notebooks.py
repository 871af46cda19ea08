"""Execute the notebooks in ``notebooks/`` and store their outputs and figures in place.

``make notebooks`` runs every notebook at its full size (``JAXQUEUE_FAST`` unset; each notebook
states its sizes in its first code cell); ``python tools/run_notebooks.py NAME ...`` runs only
the notebooks named (stem or path). ``--fast`` executes at the test suite's size
(``JAXQUEUE_FAST=1``) and, like the test suite, does not store anything unless ``--store`` is
given. Prints the wall time of each notebook.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def run(path: pathlib.Path, *, fast: bool, store: bool, timeout: int) -> float:
    import nbclient
    import nbformat

    # the kernel's default (inline) matplotlib backend stores the figures; Agg would drop them
    os.environ.pop("MPLBACKEND", None)
    if fast:
        os.environ["JAXQUEUE_FAST"] = "1"
    else:
        os.environ.pop("JAXQUEUE_FAST", None)
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    t0 = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - t0
    if store:
        nb.metadata.pop("widgets", None)
        nbformat.write(nb, path)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="notebook stems or paths (default: all)")
    parser.add_argument("--fast", action="store_true", help="JAXQUEUE_FAST=1 (the test size)")
    parser.add_argument("--store", action="store_true", help="store outputs even with --fast")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    args = parser.parse_args(argv)
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    if args.names:
        wanted = {pathlib.Path(n).stem for n in args.names}
        paths = [p for p in paths if p.stem in wanted]
        if len(paths) != len(wanted):
            parser.error(f"unknown notebooks: {sorted(wanted - {p.stem for p in paths})}")
    store = args.store or not args.fast
    for path in paths:
        seconds = run(path, fast=args.fast, store=store, timeout=args.timeout)
        mode = "fast" if args.fast else "full"
        print(f"{path.name}: {seconds:.0f} s ({mode}{', stored' if store else ''})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
