"""`jaxqueue mjqm exact`: the JSON contract and every refusal as one line (exit status 2 for a
malformed command line, 1 for a refusal by the model or the file)."""

from __future__ import annotations

import json
import math

import pytest

from jaxqueue.cli import main

SMALL = """
servers = 4
[[classes]]
cores = 1
prob = 0.7
law = "exponential"
mean = 1.0
[[classes]]
cores = 4
prob = 0.3
law = "exponential"
mean = 2.0
"""


def _run(argv, capsys):
    status = main(argv)
    out = capsys.readouterr()
    return status, out.out, out.err


def test_exact_json_contract_from_a_file(tmp_path, capsys):
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    status, out, _ = _run(
        ["mjqm", "exact", "--scenario", str(path), "--lam", "0.5", "--json"], capsys
    )
    assert status == 0
    res = json.loads(out)
    assert res["method"] == "exact" and res["status"] == "ok"
    assert {"wait_mean", "classes", "lambda_c", "phases"} <= set(res)
    assert [c["cores"] for c in res["classes"]] == [1, 4]
    # the overall mean wait is the probability-weighted class mean (Little per class)
    mix = sum(c["prob"] * c["wait_mean"] for c in res["classes"])
    assert res["wait_mean"] == pytest.approx(mix, rel=1e-12)
    # --load is a fraction of the exact limit
    status, out, _ = _run(
        ["mjqm", "exact", "--scenario", str(path), "--load", "0.5", "--json"], capsys
    )
    assert json.loads(out)["lam"] == pytest.approx(0.5 * res["lambda_c"], rel=1e-12)


@pytest.mark.parametrize(
    ("argv", "needles", "code"),
    [
        (["--scenario", "five-class-erlang3", "--lam", "1.0"], ["phases", "mjqm simulate"], 1),
        (["--scenario", "five-class-hyperexp", "--lam", "1.0"], ["phases", "mjqm sample"], 1),
        (
            ["--scenario", "two-class-256", "--lam", "25"],
            ["lambda_c = 20.448", "stability limit"],
            1,
        ),
        (["--scenario", "two-class-256", "--load", "1.0"], ["lambda_c = 20.448"], 1),
        (
            ["--scenario", "borg-cell-b", "--lam", "1"],
            ["phases", "GB and", "CPU-s", "mjqm simulate"],
            1,
        ),
        (["--scenario", "five-class-exp", "--lam", "-1"], ["--lam", "> 0"], 2),
        (["--scenario", "five-class-exp"], ["--lam", "--load"], 2),
        (["--scenario", "m-model-sym", "--lam", "1"], ["not a multiserver-job workload"], 2),
        (["--scenario", "missing.toml", "--lam", "1"], ["missing.toml", "no such file"], 1),
        (["--scenario", "five-class-exp", "--lam", "1", "--quantiles", "0.5,1"], ["(0, 1)"], 2),
        (["--scenario", "five-class-exp", "--lam", "1", "--quantiles", "0"], ["(0, 1)"], 2),
        (["--scenario", "five-class-exp", "--lam", "1", "--quantiles", "a"], ["'a'"], 2),
        (["--scenario", "five-class-exp", "--lam", "1", "--tail", "1,-2"], [">= 0", "-2"], 2),
        (["--scenario", "five-class-exp", "--lam", "1", "--tail", "1,inf"], [">= 0"], 2),
        (["--scenario", "five-class-exp", "--lam", "1", "--tail", "x"], ["'x'"], 2),
    ],
)
def test_exact_refusals_are_one_line(argv, needles, code, capsys):
    """One line on stderr; under ``--json`` also ``{"error", "exit_status"}`` on stdout; 2 for
    a command line that is not well formed, 1 for a refusal by the model or the file."""
    status, out, err = _run(["mjqm", "exact", *argv, "--json"], capsys)
    assert status == code and json.loads(out) == {"error": err.strip(), "exit_status": code}
    lines = err.strip().splitlines()
    assert len(lines) == 1 and ": error: " in lines[0], err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


MM2 = """
servers = 2
[[classes]]
cores = 1
prob = 1.0
law = "exponential"
mean = 1.0
"""


def test_exact_quantiles_and_tail_json_are_erlang_c(tmp_path, capsys):
    """``--quantiles`` and ``--tail`` on M/M/2 (lam 1.5, mu 1): Erlang C written here,
    ``P(W > t) = C e^{-(2 - 1.5) t}`` with ``C = 0.6428...``; keys as typed."""
    path = tmp_path / "mm2.toml"
    path.write_text(MM2)
    argv = ["mjqm", "exact", "--scenario", str(path), "--lam", "1.5", "--json"]
    status, out, _ = _run([*argv, "--quantiles", "0.5,.9,0.99", "--tail", "0,1,10.0"], capsys)
    assert status == 0
    res = json.loads(out)
    a = 1.5
    C = (a**2 / 2 * 2 / (2 - a)) / (1 + a + a**2 / 2 * 2 / (2 - a))
    for o in (res, res["classes"][0]):
        assert list(o["wait_quantiles"]) == ["0.5", ".9", "0.99"]
        assert list(o["wait_tail"]) == ["0", "1", "10.0"]
        assert o["p_wait"] == pytest.approx(C, abs=1e-10)
        # the reported bound on the uniformisation's truncation of P(W > t)
        assert 0.0 <= o["wait_tail_error"] <= 1e-10
        for key, t in (("0", 0.0), ("1", 1.0), ("10.0", 10.0)):
            assert o["wait_tail"][key] == pytest.approx(C * math.exp(-0.5 * t), abs=1e-10)
        for key, q in (("0.5", 0.5), (".9", 0.9), ("0.99", 0.99)):
            closed = max(0.0, math.log(C / (1 - q)) / 0.5)
            assert o["wait_quantiles"][key] == pytest.approx(closed, abs=1e-8)
    assert res["classes"][0]["response_mean"] == pytest.approx(C / 0.5 + 1.0, rel=1e-10)
    # without the flags, no distribution keys
    status, out, _ = _run(argv, capsys)
    assert "wait_quantiles" not in json.loads(out) and "wait_tail" not in json.loads(out)
