"""The import graph of ``jaxqueue/`` read from the source (``ast``; the package is not imported):
no cycle, no import from a lower layer to a higher one, and every import inside a function says
why it is there.

Edges are every ``import`` / ``from ... import`` naming a module of the package, at module level
or inside a function (a function-level import is still a dependency), plus the package
``__init__`` that Python runs first when the target lives in a package the importer is not in.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "jaxqueue"

#: Bottom to top, as ``docs/ARCHITECTURE.md`` draws them. A module belongs to the longest
#: prefix listed (``jaxqueue`` itself only by its name).
LAYERS: list[tuple[str, ...]] = [
    (
        "jaxqueue._document",
        "jaxqueue._random",
        "jaxqueue._sharding",
        "jaxqueue._jit",
        "jaxqueue._memory",
        "jaxqueue._tables",
    ),
    ("jaxqueue.dist", "jaxqueue.stats"),
    ("jaxqueue.pools", "jaxqueue.networks", "jaxqueue.sched", "jaxqueue.mjqm"),
    ("jaxqueue.scenarios", "jaxqueue.optimize", "jaxqueue.studies", "jaxqueue.traces"),
    ("jaxqueue.cli", "jaxqueue.plot", "jaxqueue", "jaxqueue.__main__"),
]

#: The models do not import one another, except these: a network is made of pools, and the
#: scheduler runs on a pool's compatibility graph (its random assignment and stability LP).
MODEL_USES = {
    "jaxqueue.networks": {"jaxqueue.pools"},
    "jaxqueue.sched": {"jaxqueue.pools"},
}


def _modules() -> dict[str, tuple[pathlib.Path, bool]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


MODULES = _modules()


def _targets(module: str, is_pkg: bool, node) -> list[str]:
    """The modules of the package that ``node`` imports."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".") if is_pkg else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        names = [
            f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names
        ]
    out = []
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if not name:
            continue
        # the packages Python runs on the way, unless the importer is inside them already
        parts = name.split(".")
        for k in range(1, len(parts) + 1):
            step = ".".join(parts[:k])
            if step in MODULES and not (module == step or module.startswith(step + ".")):
                out.append(step)
    return out


def _imports(path: pathlib.Path):
    """``(node, in_function)`` for every import statement of the file."""
    found = []

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, in_function))
            inside = in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            walk(child, inside)

    walk(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def _graph() -> dict[str, dict[str, str]]:
    """``graph[a][b]``: where ``a`` imports ``b`` (``path:line``, ``(in a function)``)."""
    graph: dict[str, dict[str, str]] = {m: {} for m in MODULES}
    for module, (path, is_pkg) in MODULES.items():
        for node, in_function in _imports(path):
            where = f"{path.relative_to(ROOT)}:{node.lineno}" + (
                " (in a function)" if in_function else ""
            )
            for target in _targets(module, is_pkg, node):
                if target != module:
                    graph[module].setdefault(target, where)
    return graph


def _layer(module: str) -> tuple[int, str]:
    """``(layer index, the prefix that places it)``."""
    best = None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module == prefix or (prefix != "jaxqueue" and module.startswith(prefix + "."))
            if inside and (best is None or len(prefix) > len(best[1])):
                best = (i, prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS (and the architecture)")
    return best


def _cycles(graph) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    for module in MODULES:
        _layer(module)


@pytest.fixture(scope="module")
def graph():
    """The import graph, parsed once for the two tests below (they only read it)."""
    return _graph()


def test_cycle_finder_finds_a_cycle():
    toy = {"a": {"b": "a.py:1"}, "b": {"c": "b.py:1"}, "c": {"a": "c.py:1"}, "d": {"a": "d.py:1"}}
    assert _cycles(toy) == [["a", "b", "c"]]


def test_no_import_cycle(graph):
    cycles = _cycles(graph)
    lines = []
    for comp in cycles:
        lines.append("cycle: " + ", ".join(comp))
        lines += [
            f"  {a} -> {b}  ({graph[a][b]})" for a in comp for b in sorted(graph[a]) if b in comp
        ]
    assert not cycles, "\n".join(lines)


def test_no_upward_import(graph):
    bad = []
    for a, targets in graph.items():
        (la, pa) = _layer(a)
        for b, where in targets.items():
            (lb, pb) = _layer(b)
            upward = lb > la
            sideways = la == lb == 2 and pa != pb and pb not in MODEL_USES.get(pa, set())
            if upward or sideways:
                bad.append(f"  {a} -> {b}  ({where}; layer {la} {pa} -> layer {lb} {pb})")
    assert not bad, "imports against the layers:\n" + "\n".join(sorted(bad))


def test_function_level_imports_say_why():
    """An import inside a function avoids a real cost (jax at command-line start-up, an
    optional dependency); it says so in a comment on its line or the line above (for a run
    of imports, on one of them or above the run)."""
    bad = []
    for _module, (path, _) in MODULES.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        found = _imports(path)
        covered = {k for node, _ in found for k in range(node.lineno, node.end_lineno + 1)}
        for node, in_function in found:
            if not in_function:
                continue
            here = lines[node.lineno - 1]
            # a run of imports (blank lines between them) shares one comment, above or on it
            above, said = node.lineno - 1, "#" in here
            while above in covered or (above and not lines[above - 1].strip()):
                said = said or "#" in lines[above - 1]
                above -= 1
            if not (said or (above and "#" in lines[above - 1])):
                bad.append(f"  {path.relative_to(ROOT)}:{node.lineno}: {here.strip()}")
    assert not bad, "imports inside functions without a reason comment:\n" + "\n".join(bad)


def test_mjqm_exports_its_front_doors_explicitly():
    """``jaxqueue.mjqm`` re-exports each public name as ``from ._x import f as f``, at most 30
    of them (its subpackages ``policies`` and ``options`` hold the rest); nothing private."""
    tree = ast.parse((PACKAGE / "mjqm" / "__init__.py").read_text(encoding="utf-8"))
    aliases = [a for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names]
    implicit = [a.name for a in aliases if a.asname != a.name]
    private = [a.name for a in aliases if a.name.startswith("_")]
    assert not implicit and not private, (implicit, private)
    assert len(aliases) <= 30, sorted(a.name for a in aliases)
