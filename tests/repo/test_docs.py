"""The docs site builds with ``mkdocs build --strict``, documents every public name, and no
help text, docstring or notebook names a file that is not in the repository."""

import ast
import importlib
import inspect
import pathlib
import re
import subprocess
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import mkdocs_hooks  # noqa: E402  (tools/ is not a package)

MD_FILE = re.compile(r"(?<![\w.-])((?:[\w.-]+/)*[\w-]+\.md)\b")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip(
        "mkdocs", reason="mkdocs is not installed (it is in the 'docs' and 'test' extras)"
    )
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed ('docs' extra)")
    pytest.importorskip("mkdocs_jupyter", reason="mkdocs-jupyter is not installed ('docs' extra)")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_site_builds_strict(site):
    for page in ("index.html", "cli/index.html", "bibliography/index.html", "api/index.html"):
        assert (site / page).is_file(), page
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert (site / "notebooks" / nb.stem / "index.html").is_file(), nb.name


def test_site_works_offline(site):
    """No script, style sheet or font from outside (MathJax is served from the site), the
    notebooks' titles keep their code spans in the nav, the docstrings' Sphinx roles are not
    shown raw, and the docs say how to get the search box (a served site)."""
    pages = sorted(site.rglob("*.html"))
    outside = re.compile(r'<(?:script|link)[^>]*(?:src|href)="(?:https?:)?//[^"]*"')
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert not outside.search(html), (page, outside.search(html).group(0))
        assert not re.search(r":(?:func|class|data|meth|attr|mod):(?:<code>|`)", html), page
    assert (site / "javascripts" / "mathjax" / "tex-mml-chtml.js").stat().st_size > 100_000
    fonts = site / "javascripts" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2"
    assert any(fonts.glob("*.woff")), fonts
    mjsre = (site / "notebooks" / "mjsre" / "index.html").read_text(encoding="utf-8")
    assert "stability limit ()" not in mjsre and "stability limit (mjsre)" in mjsre
    assert "mkdocs serve" in (ROOT / "docs" / "index.md").read_text()


def test_every_public_name_in_api_reference(site):
    """Every public name of every public module is documented (a mkdocstrings block with an
    anchor named after it, where the object is defined) or listed with a link (re-exports,
    submodules, constants), and every public function and class has a docstring."""
    missing, undocumented = [], []
    for module in mkdocs_hooks.API_MODULES:
        html = (site / "api" / module / "index.html").read_text()
        mod = importlib.import_module(module)
        for name in mkdocs_hooks.public_names(module):
            obj = getattr(mod, name)
            full = f"{module}.{name}"
            if isinstance(obj, types.ModuleType) or not callable(obj):
                found = f"<code>{full}</code>" in html
            else:
                found = f'id="{full}"' in html or f"<code>{full}</code>" in html
                if not (inspect.getdoc(obj) or "").strip():
                    undocumented.append(full)
            if not found:
                missing.append(full)
    assert not missing, f"not in the API reference: {missing}"
    assert not undocumented, f"public names without a docstring: {undocumented}"


def test_cli_reference_lists_every_command(site):
    from jaxqueue.cli import build_parser

    html = (site / "cli" / "index.html").read_text()
    progs = [prog for prog, _ in mkdocs_hooks._cli_parsers(build_parser(), "jaxqueue")]
    assert len(progs) > 10
    assert all(f'id="{mkdocs_hooks._slug(p)}"' in html for p in progs)


def _repo_files() -> set[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    files = set(out.stdout.split()) if out.returncode == 0 else set()
    # pages written in this checkout but not committed yet count too
    files |= {str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")}
    return files


def _strings() -> list[tuple[str, str]]:
    """``(where, text)`` for every string literal of the package (docstrings, help texts,
    messages) and every cell of every notebook."""
    found = []
    for path in sorted((ROOT / "jaxqueue").rglob("*.py")):
        rel = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append((f"{rel}:{node.lineno}", node.value))
    import nbformat

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            found.append((f"{path.relative_to(ROOT)} cell {i}", cell.source))
    return found


def test_no_reference_to_files_outside_the_repository():
    """Help texts, docstrings and notebooks cite the papers by bibliography key
    (``docs/bibliography.md``), never ``papers/*.md`` or another file a reader cannot open."""
    files = _repo_files()
    names = {pathlib.PurePosixPath(f).name for f in files}
    bad = []
    for where, text in _strings():
        if "papers/" in text:
            bad.append(f"{where}: papers/")
        for ref in MD_FILE.findall(text):
            ok = ref in files if "/" in ref else ref in names
            if not ok:
                bad.append(f"{where}: {ref}")
    assert not bad, "names of files that are not in the repository:\n" + "\n".join(bad)


def test_bibliography_defines_every_key():
    text = (ROOT / "docs" / "bibliography.md").read_text()
    for key in ("bf-recursive", "bf-clusters", "bf-networks", "mjsre"):
        assert f'<span id="{key}"></span>`{key}`' in text, key
