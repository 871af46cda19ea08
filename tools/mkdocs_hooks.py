"""mkdocs hooks: the CLI reference and the API reference pages, generated at build time.

Both pages are built from the code itself, so they cannot drift from it:

* ``cli.md``: the ``--help`` text of every ``jaxqueue`` command, walked from the argparse
  parser of :func:`jaxqueue.cli.build_parser`;
* ``api/<module>.md``: one page per public module with a mkdocstrings block (``::: name``) for
  every public name (the module's ``__all__``, else the names its ``__init__`` re-exports). An
  object exported by several modules is documented once, where it is defined, and linked from
  the others.

The site needs no network: MathJax is copied from the ``django-static-mathjax`` package (the
``docs`` extra) into ``javascripts/mathjax/`` (:func:`on_post_build`), and the Sphinx roles of
the docstrings (``:func:`name```) are shown as code (:func:`on_page_content`).

``API_MODULES`` and :func:`public_names` are also used by ``tests/repo/test_docs.py``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
import shutil
import types

API_MODULES = (
    "jaxqueue.pools",
    "jaxqueue.pools.structured",
    "jaxqueue.networks",
    "jaxqueue.sched",
    "jaxqueue.mjqm",
    "jaxqueue.mjqm.policies",
    "jaxqueue.mjqm.options",
    "jaxqueue.optimize",
    "jaxqueue.dist",
    "jaxqueue.stats",
    "jaxqueue.scenarios",
    "jaxqueue.traces",
    "jaxqueue",
)
STUDIES = (
    "jaxqueue.studies.bf_recursive",
    "jaxqueue.studies.bf_clusters",
    "jaxqueue.studies.mjsre",
)


def public_names(module: str) -> list[str]:
    """The public names of ``module``: ``__all__``, else every name not starting with ``_``
    (submodules included, so that ``jaxqueue.dist`` lists what its ``__init__`` exports)."""
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n in vars(mod) if not n.startswith("_") and n != "annotations"]
    return list(names)


def page_of(module: str) -> str:
    return f"api/{module}.md"


def _canonical() -> dict[int, str]:
    """``id(obj) -> 'module.name'`` where each object is documented (the first module of
    ``API_MODULES`` that exports it; ``jaxqueue`` comes last, so re-exports link down)."""
    where: dict[int, str] = {}
    for module in API_MODULES:
        mod = importlib.import_module(module)
        for name in public_names(module):
            obj = getattr(mod, name)
            if _documentable(obj):
                where.setdefault(id(obj), f"{module}.{name}")
    return where


def _documentable(obj: object) -> bool:
    return inspect.isclass(obj) or inspect.isfunction(obj) or callable(obj)


def _module_page(module: str, where: dict[int, str]) -> str:
    mod = importlib.import_module(module)
    lines = [
        f"# `{module}`",
        "",
        f"::: {module}",
        "    options:",
        "      members: false",
        "      show_root_heading: false",
        "      show_root_toc_entry: false",
        "",
    ]
    consts, links, blocks = [], [], []
    for name in public_names(module):
        obj = getattr(mod, name)
        full = f"{module}.{name}"
        if isinstance(obj, types.ModuleType):
            target = obj.__name__
            if target in API_MODULES:
                links.append(f"| `{full}` | module: [`{target}`]({target}.md) |")
            else:
                links.append(f"| `{full}` | module `{target}` |")
        elif not _documentable(obj):
            consts.append(f"| `{full}` | `{obj!r}` |")
        elif where[id(obj)] != full:
            canon = where[id(obj)]
            owner = canon.rsplit(".", 1)[0]
            links.append(f"| `{full}` | same object as [`{canon}`]({owner}.md#{canon}) |")
        else:
            blocks.append(f"::: {full}\n")
    if consts:
        lines += ["## Constants", "", "| name | value |", "|---|---|", *consts, ""]
    if links:
        lines += ["## Re-exported names", "", "| name | what |", "|---|---|", *links, ""]
    if blocks:
        lines += ["## Functions and classes", "", *blocks]
    return "\n".join(lines)


def _studies_page() -> str:
    lines = [
        "# `jaxqueue.studies`",
        "",
        "The papers' tables and figures (`jaxqueue reproduce NAME`). Each module computes one "
        "study and writes its figures and CSV files.",
        "",
    ]
    for module in STUDIES:
        lines += [f"::: {module}", "    options:", "      heading_level: 2", ""]
    return "\n".join(lines)


def _api_index() -> str:
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings (mkdocstrings) at every build: one page per public "
        "module, one entry per public name (the module's `__all__`, else what its `__init__` "
        "exports). The citations in the docstrings (`bf-recursive`, `bf-clusters`, "
        "`bf-networks`, `mjsre`, errata items) are defined on the "
        "[bibliography](../bibliography.md) page.",
        "",
        "| module | public names |",
        "|---|---|",
    ]
    for module in (*API_MODULES, "jaxqueue.studies"):
        n = len(public_names(module)) if module != "jaxqueue.studies" else len(STUDIES)
        lines.append(f"| [`{module}`]({module}.md) | {n} |")
    return "\n".join(lines) + "\n"


def _cli_parsers(parser: argparse.ArgumentParser, prefix: str):
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _cli_parsers(sub, f"{prefix} {name}")


def cli_page() -> str:
    """The ``--help`` text of every command, at a fixed width of 100 columns."""
    from jaxqueue.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        parsers = list(_cli_parsers(build_parser(), "jaxqueue"))
        lines = [
            "# Command-line reference",
            "",
            "Generated at every docs build from the argparse parser "
            "(`jaxqueue.cli.build_parser`), so it is the `--help` text of the installed "
            "version. Conventions: `--json` prints one JSON object on stdout (logs and progress "
            "on stderr); random commands take `--seed`; estimates carry a `status` "
            "(see [statuses](concepts/statuses.md)), and `--strict` exits 3 when it is not "
            "`ok`. Citations in the help texts refer to the [bibliography](bibliography.md).",
            "",
        ]
        for prog, _ in parsers[1:]:
            depth = prog.count(" ")
            lines.append(f"{'    ' * (depth - 1)}- [`{prog}`](#{_slug(prog)})")
        lines.append("")
        for prog, p in parsers:
            level = "#" * min(prog.count(" ") + 1, 4)
            lines += [
                f"#{level} `{prog}` {{#{_slug(prog)}}}",
                "",
                "```text",
                p.format_help().rstrip(),
                "```",
                "",
            ]
        return "\n".join(lines)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def _slug(prog: str) -> str:
    return prog.replace(" ", "-")


def generated_pages() -> dict[str, str]:
    where = _canonical()
    pages = {"cli.md": cli_page(), "api/index.md": _api_index()}
    for module in API_MODULES:
        pages[page_of(module)] = _module_page(module, where)
    pages["api/jaxqueue.studies.md"] = _studies_page()
    return pages


def on_files(files, config):
    from mkdocs.structure.files import File

    for uri, content in generated_pages().items():
        files.append(File.generated(config, uri, content=content))
    return files


if __name__ == "__main__":  # print one page: python tools/mkdocs_hooks.py cli.md
    import sys

    print(generated_pages()[sys.argv[1] if len(sys.argv) > 1 else "cli.md"])


BIB_KEYS = ("bf-recursive", "bf-clusters", "bf-networks", "mjsre")


MATHJAX_PARTS = ("tex-mml-chtml.js", "output/chtml/fonts/woff-v2", "ui", "a11y")
"""What the site serves of MathJax's ``es5`` folder: the component, its fonts, and the parts
it loads on demand (menu, accessibility)."""

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|data|mod|obj|exc):<code>~?([^<]+)</code>")


def mathjax_folder() -> str:
    """MathJax 3's ``es5`` folder in the ``django-static-mathjax`` package (import name
    ``mathjax``), which holds the same files as MathJax's npm release."""
    import importlib.util

    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "MathJax for the site comes from the django-static-mathjax package: "
            "pip install -e '.[docs]'"
        )
    return os.path.join(list(spec.submodule_search_locations)[0], "static", "mathjax", "es5")


def on_post_build(config):
    """Serve MathJax from the site itself (``javascripts/mathjax/``), not from a CDN."""
    src, dest = mathjax_folder(), os.path.join(config["site_dir"], "javascripts", "mathjax")
    for part in MATHJAX_PARTS:
        a, b = os.path.join(src, part), os.path.join(dest, part)
        if os.path.isdir(a):
            shutil.copytree(a, b, dirs_exist_ok=True)
        else:
            os.makedirs(os.path.dirname(b), exist_ok=True)
            shutil.copyfile(a, b)


_HEADING = re.compile(r'<h([1-6])[^>]*\bid="([^"]+)"[^>]*>(.*?)</h\1>', re.S)


def _notebook_titles(html: str, page) -> None:
    """A notebook page's title and table of contents (the nav) from its rendered headings:
    the notebook reader drops their code spans (``(`mjsre`)`` became ``()``) and with them
    part of the anchors, so the items take the headings' text and ids, in document order."""
    import html as html_lib

    headings = []
    for _, anchor, inner in _HEADING.findall(html):
        inner = re.sub(r'<a class="anchor-link".*?</a>', "", inner, flags=re.S)
        headings.append((anchor, html_lib.unescape(re.sub(r"<[^>]+>", "", inner)).strip()))
    items = []

    def walk(nodes):
        for node in nodes:
            items.append(node)
            walk(node.children)

    walk(page.toc)
    if len(items) != len(headings):
        return
    for item, (anchor, text) in zip(items, headings, strict=True):
        item.id, item.title = anchor, text
    if items and page.title:
        page.title = items[0].title


def on_page_content(html, page, config, files):
    """Show the docstrings' Sphinx roles (``:func:`name```) as code, and link every citation
    key (`mjsre`, ...) to its entry in the bibliography."""
    html = _ROLE.sub(r"<code>\1</code>", html)
    if page.file.src_uri.endswith(".ipynb"):
        _notebook_titles(html, page)
    if page.file.src_uri == "bibliography.md":
        return html
    up = "../" * page.url.count("/")
    for key in BIB_KEYS:
        html = html.replace(
            f"<code>{key}</code>", f'<a href="{up}bibliography/#{key}"><code>{key}</code></a>'
        )
    return html
