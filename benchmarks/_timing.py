"""Timing helpers shared by the benchmarks: compile time apart from run time, and other code
loaded beside this one (old against new in one process)."""

from __future__ import annotations

import atexit
import importlib.util
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import jax


def time_jit(fn: Callable, *args, repeats: int = 5) -> tuple[float, float]:
    """Return ``(compile_s, best_run_s)`` of ``jax.jit(fn)(*args)``."""
    jitted = jax.jit(fn)
    t0 = time.perf_counter()
    lowered = jitted.lower(*args)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        best = min(best, time.perf_counter() - t0)
    return compile_s, best


def time_call(fn: Callable, *args, repeats: int = 3) -> float:
    """Best wall time of ``fn(*args)`` (results blocked on)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return best


def load_as(name: str, path: pathlib.Path):
    """The module file or package folder ``path`` (another checkout's code) imported as
    ``name``: a submodule name inside ``jaxqueue`` makes its relative imports resolve there."""
    folder = path.is_dir()
    spec = importlib.util.spec_from_file_location(
        name,
        path / "__init__.py" if folder else path,
        submodule_search_locations=[str(path)] if folder else None,
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def git_extract(root: pathlib.Path, rev: str, path: str) -> pathlib.Path:
    """``path`` of git revision ``rev`` of the repository at ``root``, extracted to a temporary
    folder removed at exit; returns that folder (``path`` lies inside it)."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="jaxqueue_old_"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    tar = subprocess.run(
        ["git", "-C", str(root), "archive", rev, path], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=tar, check=True)
    return tmp
