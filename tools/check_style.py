"""Check that the package's code reads like the anchors (docs: /work/shared/STYLE.md).

Plain Python (ast, tokenize, re); it imports neither jax nor the package. Rules and limits:

  lab        0  a comment, docstring or string (or a README line) citing a date, an issue
                number or a measured timing / speed-up: those belong in commit messages and
                benchmarks/RESULTS.md
  docstring  0  a module docstring over 25 lines
  long       2  a function over 80 lines without a docstring
  import     0  an import inside a function without a one-line reason comment (on the line,
                or on the comment line right above it)
  cache      0  a module-level mutable cache: a module-level dict/list/set that the module
                mutates, a name like _CACHE bound to one, or an unbounded functools.cache

Not flagged (on purpose): paper citations ("eq. (8)", "Section 4.4", "Table 2", "Figure 3",
"Algorithm 2", "Theorem 1"), version numbers ("jax 0.4.30", "Python 3.10"), hex colours
("#1f77b4"), powers and sizes ("2^14 jobs", "6 GiB", "64x64"), ``functools.lru_cache(maxsize=N)``
(bounded, keyed on static shapes), `# noqa` / `# type:` comments.

Usage: python tools/check_style.py [--summary] [--rule RULE] [PATH ...]
(default paths: jaxqueue/ and README.md). Exit status 1 if a rule is over its limit.
``--selftest`` checks the patterns against the examples in ``_SELFTEST``.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMITS = {"lab": 0, "docstring": 0, "long": 2, "import": 0, "cache": 0}
MAX_DOCSTRING_LINES = 25
MAX_FUNCTION_LINES = 80

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.?"
_LAB = {
    "date": re.compile(
        rf"\b20\d\d-[01]\d(?:-[0-3]\d)?\b|\b{_MONTH} (?:[0-3]?\d,? )?20\d\d\b"
        rf"|\b[0-3]?\d {_MONTH} 20\d\d\b"
    ),
    "issue": re.compile(
        r"\b(?:issues?|PR|pull request|ticket)s? ?#?\d+\b|(?<![\w&/#])#\d{1,4}(?![\w])", re.I
    ),
    "timing": re.compile(
        # "measured" as a report of a measurement, not "the measured jobs" of a window
        r"\b[Mm]easured(?:[:,] (?!the jobs)| on (?:a|the|two|\d)\b| at \d| in one process| coverage"
        r"| with \d| against| \d| peak| \d+(?:\.\d+)?x)"
        r"|\bMeasured \(|\(measured[:,]|\bprofiled\b"
        r"|\btried and not kept\b|\bnot kept\b|\bbest of \d\b"
        r"|\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?x (?:faster|slower|speed|as fast|quicker|cheaper"
        r"|costlier|the cost|the work|the necessary|longer to)"
        r"|(?<!between )\b\d+\.\d+x\b|\b\d+(?:\.\d+)?-\d+(?:\.\d+)?x\b"
        r"|\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?% (?:faster|slower|cheaper|more expensive)"
        r"|\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?(?:ms|us|µs|ns|msec|usec)\b"
        r"|\b\d+\.\d+ ?(?:s|sec|seconds|min|minutes)\b"
        r"|\b(?:took|takes|take|in|than|about|~) ?\d+(?:\.\d+)? ?"
        r"(?:s|sec|seconds|min|minutes|h|hours)\b"
        r"|\b\d+ ?(?:s|min|minutes|seconds)\b"
        r"(?= (?:per|each|wall|CPU|on (?:a |the )?(?:\d-core|\d cores)))"
        r"|\b\d+ min \d+ s\b"
        r"|\b(?:ended|finished|stopped|done|converged) after \d+(?:\.\d+)? ?s\b"
        r"|\b\d+(?:\.\d+)? (?:minutes|seconds|hours)\b"
        r"|\b(?:minutes?|seconds?|hours?) on (?:a |the )?\d-core\b"
        r"|\b\d+(?:\.\d+)? -> \d+(?:\.\d+)? ?(?:M|G|k|ns|us|ms|s)\b"
        r"|\b(?:cost|time|speed)\S* by (?:about )?\d+(?:\.\d+)?%"
        r"|\bcosts? (?:about )?\d+(?:\.\d+)?x\b"
        r"|\b(?:M|k)? ?(?:sample-)?jobs/s\b|\bM/s\b|\bCPU-seconds\b"
        r"|\b\d+ (?:thunks|fused loops)\b|\bper thunk\b",
    ),
}

_SELFTEST = {
    # line: expected kind or None
    "measured on 2026-11-23": "date",
    "as of Nov 2026": "date",
    "see 23 Nov 2026": "date",
    "(issue #4)": "issue",
    "issue 17 brought": "issue",
    "fixes #17": "issue",
    "1.4x faster on 2 devices": "timing",
    "takes 12 ms a round": "timing",
    "130 us per round": "timing",
    "6.2 M jobs/s wall": "timing",
    "counts 85 thunks": "timing",
    "the default suite takes 9 min 50 s": "timing",
    "a 1.43x speed-up": "timing",
    "(measured: 13 -> 43 ns per sample-job)": "timing",
    "Measured on the 2-core CPU": "timing",
    "0.87-0.95x on one device": "timing",
    "about 3x slower per word": "timing",
    "was 15-25% slower": "timing",
    "control took 61 s (batch horizon": "timing",
    "about 10 minutes on 2 cores": "timing",
    "(K = 400 in 0.8 s)": "timing",
    "Tried and not kept: a dense rewrite": "timing",
    "10,000 samples ended after 21 s with": "timing",
    "15 minutes at 0.9 lambda_c": "timing",
    "under a minute on a 2-core CPU": "timing",
    "the scan's cost by about 17% (46 -> 55 M": "timing",
    "a stack fused into its consumers cost 30x the cipher": "timing",
    "budget {args.max_seconds:g} s": None,
    "--max-seconds 40 (time budget)": None,
    "all rates can grow by 66.7% (LP)": None,
    "deadlocks the thread pool of a 2-core machine": None,
    "the measured jobs of each class": None,
    "(measured - expected) / se": None,
    "Measured (tests/stats/test_ci.py, 95% level": "timing",
    "(measured, five-class-exp at 0.75": "timing",
    "Measured: the jobs warmup .. n_jobs - 1 of each replication": None,
    "Measured totals of one replication": None,
    "26 classes measured on Google Borg cell B": None,
    "the measuring window": None,
    "the smallest server speed-up": None,
    "case mjqm-speedup": None,
    "wall-clock budget for the whole call": None,
    "progress: one line per round": None,
    "shown after 2 s on a terminal": None,
    "between 1.25x and 8x the current one": None,
    "1% of jobs need all 8 servers, 20x longer": None,
    "the thunk executor runs independent ops concurrently": None,
    "eq. (8) of the paper": None,
    "Section 4.4, Table 2, Figure 3": None,
    "Algorithm 2 (pile growth)": None,
    "needs jax >= 0.4.30 and Python 3.10": None,
    "color='#1f77b4'": None,
    "budgets 2^14, 2^17, 2^20 jobs": None,
    "up to 6 GiB": None,
    "a 64x64 grid": None,
    "lam * s is the load": None,
    "the 2-device mesh": None,
    "R = 10 replications": None,
}


def _lab_kinds(text: str) -> list[str]:
    return [kind for kind, pat in _LAB.items() if pat.search(text)]


def _text_lines(path: Path, source: str) -> list[tuple[int, str]]:
    """(line number, text) for every physical line of a comment or string token."""
    out = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return out
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            if text.startswith(("noqa", "type:", "pragma")):
                continue
            out.append((tok.start[0], text))
        elif tok.type == tokenize.STRING or getattr(tokenize, "FSTRING_MIDDLE", -1) == tok.type:
            for i, line in enumerate(tok.string.splitlines()):
                out.append((tok.start[0] + i, line))
    return out


def _is_docstring_node(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


_MUTATORS = {
    "append", "extend", "insert", "update", "setdefault", "pop", "popitem", "clear",
    "add", "discard", "remove", "__setitem__",
}  # fmt: skip
_CACHE_NAME = re.compile(r"cache|memo", re.I)


def _is_mutable_literal(value: ast.AST | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        f = value.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        return name in {"dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque"}
    return False


def _check_python(path: Path, rel: str, findings: list) -> None:
    source = path.read_text()
    lines = source.splitlines()
    for lineno, text in _text_lines(path, source):
        kinds = _lab_kinds(text)
        if kinds:
            findings.append(("lab", rel, lineno, f"{'/'.join(kinds)}: {text.strip()[:100]}"))
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        findings.append(("docstring", rel, e.lineno or 0, f"syntax error: {e.msg}"))
        return

    if tree.body and _is_docstring_node(tree.body[0]):
        node = tree.body[0]
        n = node.end_lineno - node.lineno + 1
        if n > MAX_DOCSTRING_LINES:
            findings.append(("docstring", rel, node.lineno, f"module docstring of {n} lines"))

    def is_commented(lineno: int) -> bool:
        line = lines[lineno - 1]
        if "#" in line and not line.split("#", 1)[1].strip().startswith("noqa"):
            return True
        prev = lineno - 2
        while prev >= 0 and lines[prev].strip().startswith(("import ", "from ")):
            prev -= 1  # a block of imports under one reason comment
        if prev < 0:
            return False
        above = lines[prev].strip()
        # a whole-line comment, or one on the `try:` / `if ...:` that guards the import
        return above.startswith("#") or (
            above.endswith(":") is False
            and "#" in above
            and above.startswith(("try:", "if ", "else:", "except"))
        )

    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        n = fn.end_lineno - fn.lineno + 1
        if n > MAX_FUNCTION_LINES and ast.get_docstring(fn) is None:
            findings.append(("long", rel, fn.lineno, f"{fn.name}: {n} lines, no docstring"))
        for node in _walk_own(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not is_commented(node.lineno):
                names = ", ".join(a.name for a in node.names)
                mod = getattr(node, "module", None)
                what = f"from {'.' * node.level}{mod or ''} import {names}" if mod or getattr(
                    node, "level", 0) else f"import {names}"  # fmt: skip
                findings.append(("import", rel, node.lineno, f"in {fn.name}: {what}"))

    # Module-level mutable caches.
    candidates: dict[str, int] = {}
    for node in tree.body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        if _is_mutable_literal(value):
            for t in targets:
                if isinstance(t, ast.Name):
                    candidates[t.id] = node.lineno
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                d = dec.func if isinstance(dec, ast.Call) else dec
                name = d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "")
                unbounded = name == "cache" or (
                    name == "lru_cache"
                    and isinstance(dec, ast.Call)
                    and any(
                        k.arg == "maxsize" and isinstance(k.value, ast.Constant)
                        and k.value.value is None
                        for k in dec.keywords
                    )
                )  # fmt: skip
                if unbounded:
                    findings.append(
                        ("cache", rel, dec.lineno, f"{node.name}: unbounded functools.{name}")
                    )
    mutated: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                    mutated.add(t.value.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _MUTATORS and isinstance(node.func.value, ast.Name):
                mutated.add(node.func.value.id)
        elif isinstance(node, ast.Global):
            mutated.update(node.names)
    for name, lineno in candidates.items():
        if name in mutated or _CACHE_NAME.search(name):
            # A table filled once while the module is imported is not a cache: only count names
            # mutated inside a function.
            if (
                name in mutated
                and not _mutated_in_function(tree, name)
                and not _CACHE_NAME.search(name)
            ):
                continue
            findings.append(
                ("cache", rel, lineno, f"module-level mutable {name} (mutated in a function)")
            )


def _walk_own(fn: ast.AST):
    """The nodes of ``fn``'s body, not descending into nested functions (they are walked
    on their own)."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def _mutated_in_function(tree: ast.Module, name: str) -> bool:
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Global) and name in node.names:
                return True
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                ts = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                if any(
                    isinstance(t, ast.Subscript) and getattr(t.value, "id", None) == name
                    for t in ts
                ):
                    return True
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _MUTATORS
                and getattr(node.func.value, "id", None) == name
            ):
                return True
    return False


def _check_text(path: Path, rel: str, findings: list) -> None:
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        kinds = _lab_kinds(line)
        if kinds:
            findings.append(("lab", rel, lineno, f"{'/'.join(kinds)}: {line.strip()[:100]}"))


def collect(paths: list[Path]) -> list[tuple[str, str, int, str]]:
    findings: list = []
    for p in paths:
        files = sorted(p.rglob("*.py")) if p.is_dir() else [p]
        for f in files:
            try:
                rel = str(f.resolve().relative_to(ROOT))
            except ValueError:
                rel = str(f)
            if f.suffix == ".py":
                _check_python(f, rel, findings)
            else:
                _check_text(f, rel, findings)
    return findings


def _selftest() -> int:
    bad = 0
    for text, want in _SELFTEST.items():
        kinds = _lab_kinds(text)
        ok = (want in kinds) if want else not kinds
        if not ok:
            bad += 1
            print(f"selftest: {text!r}: want {want}, got {kinds}")
    print(f"selftest: {len(_SELFTEST) - bad}/{len(_SELFTEST)} ok")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path)
    ap.add_argument("--summary", action="store_true", help="counts only")
    ap.add_argument("--rule", choices=sorted(LIMITS), help="report one rule only")
    ap.add_argument("--selftest", action="store_true")
    args = ap.parse_args(argv)
    if args.selftest:
        return _selftest()
    paths = args.paths or [ROOT / "jaxqueue", ROOT / "README.md"]
    findings = collect(paths)
    if args.rule:
        findings = [f for f in findings if f[0] == args.rule]
    findings.sort(key=lambda f: (f[0], f[1], f[2]))
    if not args.summary:
        for rule, rel, lineno, msg in findings:
            print(f"{rel}:{lineno}: [{rule}] {msg}")
        print()
    per_rule = Counter(f[0] for f in findings)
    per_file: dict[str, Counter] = defaultdict(Counter)
    for rule, rel, _, _ in findings:
        per_file[rel][rule] += 1
    rules = [args.rule] if args.rule else list(LIMITS)
    over = []
    print("rule        count  limit")
    for r in rules:
        flag = "  OVER" if per_rule[r] > LIMITS[r] else ""
        if flag:
            over.append(r)
        print(f"{r:<10} {per_rule[r]:>6} {LIMITS[r]:>6}{flag}")
    if per_file:
        print("\nper file: " + "  ".join(f"{r}" for r in rules))
        for rel in sorted(per_file):
            counts = " ".join(f"{r}={per_file[rel][r]}" for r in rules if per_file[rel][r])
            print(f"  {rel}: {counts}")
    return 1 if over else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # piped into `head`
        sys.exit(0)
