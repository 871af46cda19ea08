"""Workload files (TOML / JSON) for ``scenarios.get`` and every ``--scenario`` option."""

import copy
import csv
import json
import math
import pathlib
import re
import textwrap

import numpy as np
import pytest

from jaxqueue import scenarios
from jaxqueue.cli import main
from jaxqueue.mjqm import _files
from tests.helpers import assert_close, tree_allclose

ROOT = pathlib.Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "workloads" / "five-class-exp.toml"


# ------------------------------------------------------------------ writers
def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return {math.inf: "inf", -math.inf: "-inf"}.get(v, "nan" if math.isnan(v) else repr(v))
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(v)  # int, str


def dump_toml(spec: dict) -> str:
    """Scalars first, then a non-empty list of tables as ``[[key]]`` blocks."""
    tables = {
        k: v
        for k, v in spec.items()
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)
    }
    lines = [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in spec.items() if k not in tables]
    for key, rows in tables.items():
        for row in rows:
            lines += ["", f"[[{key}]]"]
            lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in row.items()]
    return "\n".join(lines) + "\n"


def write(tmp_path, spec, fmt: str, stem: str = "wl") -> pathlib.Path:
    path = tmp_path / f"{stem}.{fmt}"
    path.write_text(dump_toml(spec) if fmt == "toml" else json.dumps(spec))
    return path


def five_class_spec(law: str) -> dict:
    """``five-class-<law>`` written out from ``data/five-class.csv``, as a user would."""
    data = ROOT / "jaxqueue" / "scenarios" / "data" / "five-class.csv"
    classes = []
    for r in csv.DictReader(data.read_text().splitlines()):
        c = {"cores": int(r["cores"]), "prob": float(r["prob"])}
        if law == "exp":
            c |= {"law": "exponential", "mean": float(r["mean"])}
        elif law == "erlang3":
            c |= {"law": "erlang", "mean": float(r["mean"]), "k": int(r["erlang_k"])}
        elif law == "hyperexp":
            p1 = float(r["hyperexp_p_phase1"])
            c |= {
                "law": "hyperexponential",
                "probs": [p1, 1.0 - p1],
                "means": [float(r["hyperexp_mean_phase1"]), float(r["hyperexp_mean_phase2"])],
            }
        else:
            c |= {
                "law": "bounded-pareto",
                "xmin": float(r["bpareto_xmin"]),
                "xmax": float(r["bpareto_xmax"]),
                "shape": float(r["bpareto_shape"]),
            }
        classes.append(c)
    return {"name": f"five-class-{law}", "servers": 20, "classes": classes}


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("fmt", ["toml", "json"])
def test_five_class_exp_round_trip(tmp_path, fmt):
    ref = scenarios.get("five-class-exp")
    spec = five_class_spec("exp")
    del spec["name"]
    w = scenarios.get(str(write(tmp_path, spec, fmt, stem="my-five")))
    assert w.name == "my-five"  # the file stem
    assert w.servers == ref.servers and w.cores == ref.cores
    assert_close(w.probs, ref.probs, rtol=0, atol=0)
    assert_close(w.mean_service(), ref.mean_service(), rtol=0, atol=0)
    assert w.arrival is None and w.specific is None


@pytest.mark.parametrize("fmt", ["toml", "json"])
@pytest.mark.parametrize("law", ["exp", "erlang3", "hyperexp", "bpareto"])
def test_every_preset_law_round_trip(tmp_path, fmt, law):
    ref = scenarios.get(f"five-class-{law}")
    w = scenarios.get(write(tmp_path, five_class_spec(law), fmt))  # a pathlib.Path works too
    assert w.name == ref.name and w.cores == ref.cores
    assert [type(s) for s in w.services] == [type(s) for s in ref.services]
    assert tree_allclose(w.services, ref.services, rtol=0, atol=0)
    assert_close(w.lambda_ideal(), ref.lambda_ideal(), rtol=1e-15)


def test_example_file_and_docstring():
    w = scenarios.get(str(EXAMPLE))
    ref = scenarios.get("five-class-exp")
    assert w.name == "five-class-exp" and w.cores == ref.cores and w.servers == ref.servers
    assert_close(w.probs, ref.probs, rtol=0, atol=0)
    assert_close(w.mean_service(), ref.mean_service(), rtol=0, atol=0)
    assert scenarios.describe(str(EXAMPLE)).endswith("five-class-exp.toml")
    # the schema example of the module docstring parses
    block = re.search(r"::\n\n(.*?)\n\nThe same in JSON", _files.__doc__, re.S).group(1)
    import tomllib

    d = _files.workload_from_dict(tomllib.loads(textwrap.dedent(block)))
    assert d.name == "two-class" and d.cores == ((1,), (10,))


def test_deterministic_suffixes_and_dispatch(tmp_path, monkeypatch):
    spec = {
        "servers": 3,
        "classes": [
            {"cores": 3, "prob": 0.25, "law": "deterministic", "value": 2},
            {"cores": 1, "prob": 0.75, "law": "exponential", "mean": 1},  # ints for floats
        ],
    }
    # another suffix: JSON, else TOML
    for text in (json.dumps(spec), dump_toml(spec)):
        (tmp_path / "wl.txt").write_text(text)
        w = scenarios.get(str(tmp_path / "wl.txt"))
        assert w.cores == ((3,), (1,)) and w.name == "wl"
        assert_close(w.mean_service(), [2.0, 1.0])
    # no separator and no suffix: a file in the working directory; presets win
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster").write_text(json.dumps(spec))
    assert scenarios.get("cluster").cores == ((3,), (1,))
    (tmp_path / "five-class-exp").write_text(json.dumps(spec))
    assert scenarios.get("five-class-exp").servers == (20,)
    with pytest.raises(ValueError, match="no parameters"):
        scenarios.get("cluster", big_mean=2.0)


def test_unknown_name_mentions_files():
    with pytest.raises(ValueError) as exc:
        scenarios.get("six-class")
    msg = str(exc.value)
    assert "unknown scenario 'six-class'" in msg and "five-class-exp" in msg
    assert msg.endswith("or a TOML/JSON workload file")


# ------------------------------------------------------------------ bad contents
GOOD = {
    "servers": 4,
    "classes": [
        {"cores": 1, "prob": 0.75, "law": "exponential", "mean": 1.0},
        {"cores": 4, "prob": 0.25, "law": "erlang", "mean": 2.0, "k": 3},
    ],
}
HYPER = {"law": "hyperexponential", "probs": [0.5, 0.5], "means": [1.0, 3.0]}
BPARETO = {"law": "bounded-pareto", "xmin": 1.0, "xmax": 100.0, "shape": 1.5}


def _set(path, value):
    """A mutation of GOOD: set (or delete, ``value=...``) the entry at ``path``."""

    def mutate(spec):
        *head, last = path
        node = spec
        for k in head:
            node = node[k]
        if value is ...:
            del node[last]
        else:
            node[last] = value

    return mutate


def _law(i, law):
    def mutate(spec):
        c = spec["classes"][i]
        spec["classes"][i] = {"cores": c["cores"], "prob": c["prob"], **copy.deepcopy(law)}

    return mutate


def _then(*mutations):
    def mutate(spec):
        for m in mutations:
            m(spec)

    return mutate


# (id, mutation, field named in the message, other expected fragments)
BAD = [
    ("unknown-top-key", _set(["serverz"], 4), "serverz", ["unknown key", "servers, classes"]),
    ("arrival", _set(["arrival"], "exponential"), "arrival", ["unknown key", "Poisson"]),
    ("unknown-class-key", _set(["classes", 0, "k"], 2), "classes[0].k", ["unknown key", "mean"]),
    ("missing-servers", _set(["servers"], ...), "servers", ["missing"]),
    ("missing-classes", _set(["classes"], ...), "classes", ["missing"]),
    ("missing-k", _set(["classes", 1, "k"], ...), "classes[1].k", ["missing"]),
    ("missing-cores", _set(["classes", 1, "cores"], ...), "classes[1].cores", ["missing"]),
    ("missing-prob", _set(["classes", 0, "prob"], ...), "classes[0].prob", ["missing"]),
    ("missing-law", _set(["classes", 0, "law"], ...), "classes[0].law", ["missing", "erlang"]),
    (
        "unknown-law",
        _set(["classes", 1, "law"], "gamma"),
        "classes[1].law",
        ["unknown law 'gamma'", "exponential, erlang, hyperexponential, bounded-pareto"],
    ),
    ("law-not-string", _set(["classes", 1, "law"], 3), "classes[1].law", ["string"]),
    ("cores-string", _set(["classes", 0, "cores"], "2"), "classes[0].cores", ["integer"]),
    ("cores-float", _set(["classes", 0, "cores"], 2.5), "classes[0].cores", ["integer", "2.5"]),
    ("cores-integral-float", _set(["classes", 0, "cores"], 2.0), "classes[0].cores", ["integer"]),
    ("cores-zero", _set(["classes", 0, "cores"], 0), "classes[0].cores", [">= 1"]),
    ("cores-over", _set(["classes", 1, "cores"], 5), "classes[1].cores", ["exceeds", "4"]),
    ("servers-bool", _set(["servers"], True), "servers", ["integer", "boolean"]),
    ("servers-zero", _set(["servers"], 0), "servers", [">= 1"]),
    ("servers-string", _set(["servers"], "4"), "servers", ["integer"]),
    ("name-not-string", _set(["name"], 3), "name", ["string"]),
    ("mean-zero", _set(["classes", 0, "mean"], 0.0), "classes[0].mean", ["> 0"]),
    ("mean-negative", _set(["classes", 1, "mean"], -1.0), "classes[1].mean", ["> 0"]),
    ("mean-string", _set(["classes", 0, "mean"], "1"), "classes[0].mean", ["number"]),
    ("mean-bool", _set(["classes", 0, "mean"], True), "classes[0].mean", ["number"]),
    ("mean-inf", _set(["classes", 0, "mean"], math.inf), "classes[0].mean", ["finite"]),
    ("mean-nan", _set(["classes", 0, "mean"], math.nan), "classes[0].mean", ["finite"]),
    ("prob-negative", _set(["classes", 0, "prob"], -0.1), "classes[0].prob", [">= 0"]),
    ("prob-inf", _set(["classes", 0, "prob"], math.inf), "classes[0].prob", ["finite"]),
    ("prob-sum", _set(["classes", 0, "prob"], 0.7), "classes[*].prob", ["sum to 0.95"]),
    ("classes-empty", _set(["classes"], []), "classes", ["empty"]),
    ("classes-not-list", _set(["classes"], 3), "classes", ["array"]),
    ("class-not-table", _set(["classes", 1], 7), "classes[1]", ["table"]),
    ("erlang-k-zero", _set(["classes", 1, "k"], 0), "classes[1].k", [">= 1"]),
    ("erlang-k-float", _set(["classes", 1, "k"], 2.5), "classes[1].k", ["integer"]),
    ("erlang-k-string", _set(["classes", 1, "k"], "3"), "classes[1].k", ["integer"]),
    ("erlang-k-bool", _set(["classes", 1, "k"], True), "classes[1].k", ["integer"]),
    (
        "hyper-lengths",
        _then(_law(1, HYPER), _set(["classes", 1, "means"], [1.0, 2.0, 3.0])),
        "classes[1].means",
        ["3 entries", "probs has 2"],
    ),
    (
        "hyper-sum",
        _then(_law(1, HYPER), _set(["classes", 1, "probs"], [0.5, 0.4])),
        "classes[1].probs",
        ["sum to 0.9"],
    ),
    (
        "hyper-empty",
        _then(_law(1, HYPER), _set(["classes", 1, "probs"], [])),
        "classes[1].probs",
        ["empty"],
    ),
    (
        "hyper-not-list",
        _then(_law(1, HYPER), _set(["classes", 1, "means"], 2.0)),
        "classes[1].means",
        ["array"],
    ),
    (
        "hyper-bad-mean",
        _then(_law(1, HYPER), _set(["classes", 1, "means"], [1.0, -3.0])),
        "classes[1].means[1]",
        ["> 0"],
    ),
    (
        "hyper-missing",
        _then(_law(1, HYPER), _set(["classes", 1, "means"], ...)),
        "classes[1].means",
        ["missing"],
    ),
    (
        "hyper-foreign-key",
        _then(_law(1, HYPER), _set(["classes", 1, "mean"], 1.0)),
        "classes[1].mean",
        ["unknown key", "law 'hyperexponential'", "probs, means"],
    ),
    (
        "bpareto-order",
        _then(_law(0, BPARETO), _set(["classes", 0, "xmax"], 1.0)),
        "classes[0].xmax",
        ["> xmin"],
    ),
    (
        "bpareto-shape",
        _then(_law(0, BPARETO), _set(["classes", 0, "shape"], 0.0)),
        "classes[0].shape",
        ["> 0"],
    ),
    (
        "bpareto-xmin",
        _then(_law(0, BPARETO), _set(["classes", 0, "xmin"], -1.0)),
        "classes[0].xmin",
        ["> 0"],
    ),
    (
        "deterministic-value",
        _law(0, {"law": "deterministic", "value": 0}),
        "classes[0].value",
        ["> 0"],
    ),
]


def _message(path) -> str:
    with pytest.raises(ValueError) as exc:
        scenarios.get(str(path))
    msg = str(exc.value)
    assert "\n" not in msg and "\r" not in msg, msg
    assert msg.startswith(f"{path}: "), msg
    return msg


def test_good_base_spec_loads(tmp_path):
    for fmt in ("toml", "json"):
        w = scenarios.get(str(write(tmp_path, GOOD, fmt)))
        assert w.cores == ((1,), (4,)) and w.services[1].k == 3


@pytest.mark.parametrize("fmt", ["toml", "json"])
@pytest.mark.parametrize(
    ("mutate", "field", "fragments"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_content_one_line(tmp_path, fmt, mutate, field, fragments):
    spec = copy.deepcopy(GOOD)
    mutate(spec)
    msg = _message(write(tmp_path, spec, fmt))
    assert f": {field}: " in msg, msg
    for fragment in fragments:
        assert fragment in msg, msg


def test_bad_files(tmp_path):
    assert _message(tmp_path / "wl.toml").endswith("wl.toml: no such file")
    (tmp_path / "dir.json").mkdir()
    assert "is a directory" in _message(tmp_path / "dir.json")
    assert "is a directory" in _message(f"{tmp_path}/")

    bad = tmp_path / "syntax.toml"
    bad.write_text("servers = 4\nclasses = [\n[[classes]\n")
    msg = _message(bad)
    assert "invalid TOML" in msg and "line 3" in msg, msg

    bad = tmp_path / "syntax.json"
    bad.write_text('{"servers": 4,\n "classes": [}\n')
    msg = _message(bad)
    assert "invalid JSON" in msg and "line 2" in msg, msg

    bad = tmp_path / "dup.json"
    bad.write_text('{"servers": 4, "servers": 5, "classes": []}')
    assert "duplicate key 'servers'" in _message(bad)

    bad = tmp_path / "dup.toml"
    bad.write_text("servers = 4\nservers = 5\n")
    assert "invalid TOML" in _message(bad)

    bad = tmp_path / "list.json"
    bad.write_text("[1, 2]")
    assert ": top level: must be a table" in _message(bad)

    bad = tmp_path / "empty.toml"
    bad.write_text("")
    assert ": servers: missing" in _message(bad)

    bad = tmp_path / "binary.toml"
    bad.write_bytes(b"servers = 4\n\xff\xfe\n")
    assert "not UTF-8" in _message(bad)

    bad = tmp_path / "junk.cfg"
    bad.write_text("servers: 4\n")
    msg = _message(bad)
    assert "neither valid JSON" in msg and "nor valid TOML" in msg, msg

    bad = tmp_path / "deep.json"
    bad.write_text("[" * 100_000 + "]" * 100_000)
    assert "invalid JSON" in _message(bad)


# ------------------------------------------------------------------ command line
def _bad_file(tmp_path, kind):
    if kind == "missing":
        return tmp_path / "absent.toml"
    path = tmp_path / f"{kind}.toml"
    if kind == "syntax":
        path.write_text("servers = \n")
    elif kind == "type":
        spec = copy.deepcopy(GOOD)
        spec["classes"][0]["cores"] = "one"
        path.write_text(dump_toml(spec))
    elif kind == "binary":
        path.write_bytes(b"\x80\x81")
    elif kind == "directory":
        path.mkdir()
    return path


COMMANDS = {
    "simulate": ["mjqm", "simulate", "--lam", "1", "--json"],
    "sample": ["mjqm", "sample", "--lam", "1", "--json"],
    "stability": ["mjqm", "stability", "--json"],
    "exact": ["mjqm", "exact", "--lam", "1", "--json"],
}


@pytest.mark.parametrize("kind", ["missing", "syntax", "type", "binary", "directory"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_cli_bad_file_exit_1(tmp_path, capsys, command, kind):
    """A workload file that cannot be read or is refused: a runtime error (exit status 1), one
    line on stderr, and under ``--json`` the same line as a JSON object on stdout."""
    path = _bad_file(tmp_path, kind)
    argv = COMMANDS[command][:2] + ["--scenario", str(path)] + COMMANDS[command][2:]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == {"error": err.strip(), "exit_status": 1}
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxqueue: error: "), err
    assert path.name in lines[0] and "Traceback" not in err


@pytest.mark.parametrize("command", ["simulate", "sample", "stability"])
def test_cli_help_mentions_files(capsys, command):
    assert main(["mjqm", command, "--help"]) == 0
    assert "TOML/JSON workload file" in " ".join(capsys.readouterr().out.split())


def test_cli_simulate_good_file(tmp_path, capsys):
    spec = {
        "name": "tiny",
        "servers": 4,
        "classes": [
            {"cores": 4, "prob": 0.2, "law": "exponential", "mean": 1.0},
            {"cores": 1, "prob": 0.5, "law": "deterministic", "value": 0.5},
            {"cores": 2, "prob": 0.3, **HYPER},
        ],
    }
    path = write(tmp_path, spec, "toml")
    argv = ["mjqm", "simulate", "--scenario", str(path), "--lam", "0.5"]
    argv += ["--jobs", "2000", "--replications", "8", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"] == "tiny" and out["servers"] == [4]
    assert [c["cores"] for c in out["classes"]] == [4, 1, 2]
    assert_close([c["prob"] for c in out["classes"]], [0.2, 0.5, 0.3])
    assert all(np.isfinite(c["wait_mean"]) and c["jobs"] > 0 for c in out["classes"])
