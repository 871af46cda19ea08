"""ruff (lint + format) is part of the suite, so style drift fails CI."""

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[2]
TARGETS = ["jaxqueue", "tests", "benchmarks"]


def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=str(pathlib.Path(sys.executable).parent)) or shutil.which(
        "ruff"
    )
    if exe is None:
        pytest.fail("ruff is not installed (it is in the 'test' extra: pip install -e '.[test]')")
    return [exe]


@pytest.mark.parametrize("args", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff(args):
    proc = subprocess.run(_ruff() + args + TARGETS, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_architecture_lists_every_public_name():
    """docs/ARCHITECTURE.md names every public name of every subpackage (so that a reader
    finds each public function from it)."""
    import importlib
    import re
    import types

    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    words = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`?", text)) | set(
        re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)
    )
    missing = []
    for mod in ("jaxqueue", "pools", "pools.structured", "sched", "networks", "mjqm", "optimize"):
        name = mod if mod == "jaxqueue" else f"jaxqueue.{mod}"
        m = importlib.import_module(name)
        public = getattr(m, "__all__", None) or [
            n for n in dir(m) if not n.startswith("_") and not n.startswith("annotations")
        ]
        for n in public:
            obj = getattr(m, n)
            if isinstance(obj, types.ModuleType) and mod != "jaxqueue":
                continue
            if n not in words:
                missing.append(f"{name}.{n}")
    for mod in ("dist", "stats"):
        m = importlib.import_module(f"jaxqueue.{mod}")
        missing += [
            f"jaxqueue.{mod}.{n}"
            for n in dir(m)
            if not n.startswith("_")
            and n not in words
            and not isinstance(getattr(m, n), types.ModuleType)
        ]
    assert not missing, f"docs/ARCHITECTURE.md does not name: {missing}"


def test_xla_cpu_options_only_through_jit_per_platform():
    """An XLA:CPU compiler option given to ``jax.jit`` directly would fail on a GPU (other
    backends reject the CPU's options): the package passes them through
    ``jaxqueue._jit.jit_per_platform`` only."""
    direct = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in sorted((ROOT / "jaxqueue").rglob("*.py"))
        if path.name != "_jit.py"
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if "compiler_options" in line
    ]
    assert not direct, direct
