"""``jaxqueue mjqm exact`` on phase-type workload files: the DESIGN keys, the numbers against the
brute-force CTMC of ``tests/references/mjqm_ph_ctmc.py`` (its tables), every refusal as one line
with its exit status."""

from __future__ import annotations

import json

import pytest

from jaxqueue.cli import main
from tests.references import mjqm_ph_ctmc as ref

# REFERENCE_SYSTEMS["s5-coxian3-erlang2"] as a workload file
S5 = """
servers = 5
[[classes]]
cores = 2
prob = 0.6
law = "coxian"
rates = [3.0, 2.0, 1.5]
cont = [0.6, 0.5]
[[classes]]
cores = 3
prob = 0.4
law = "erlang"
k = 2
mean = 1.0
"""

BPARETO = """
servers = 4
[[classes]]
cores = 1
prob = 0.5
law = "erlang"
k = 2
mean = 1.0
[[classes]]
cores = 2
prob = 0.5
law = "bounded-pareto"
xmin = 0.5
xmax = 20.0
shape = 1.5
"""


def _run(argv, capsys):
    status = main(argv)
    out = capsys.readouterr()
    return status, out.out, out.err


def test_phase_type_json_keys_and_numbers(tmp_path, capsys):
    path = tmp_path / "s5.toml"
    path.write_text(S5)
    argv = ["mjqm", "exact", "--scenario", str(path), "--lam", "0.3", "--json"]
    status, out, _ = _run([*argv, "--quantiles", "0.5,0.99", "--tail", "0.5,2"], capsys)
    assert status == 0
    res = json.loads(out)
    exp = ref.REFERENCE_VALUES["s5-coxian3-erlang2"]
    assert res["method"] == "exact" and res["status"] == "ok" and res["phases"] > 0
    assert res["lambda_c"] == pytest.approx(exp["lambda_c"], rel=1e-9)
    assert res["wait_mean"] == pytest.approx(exp["wait_mean"], rel=1e-6)
    assert res["p_wait"] == pytest.approx(exp["p_wait"], rel=1e-6)
    assert set(res["wait_quantiles"]) == {"0.5", "0.99"} and set(res["wait_tail"]) == {"0.5", "2"}
    assert res["wait_quantiles"]["0.99"] == pytest.approx(exp["wait_quantile"], rel=1e-6)
    assert res["wait_tail"]["2"] == pytest.approx(exp["wait_tail"][1], rel=1e-6)
    assert 0.0 <= res["wait_tail_error"] <= 1e-10
    for k, c in enumerate(res["classes"]):
        assert 0.0 <= c["wait_tail_error"] <= 1e-10
        assert c["wait_mean"] == pytest.approx(exp["wait_mean_class"][k], rel=1e-6)
        assert c["p_wait"] == pytest.approx(exp["p_wait_class"][k], rel=1e-6)
        assert c["wait_tail"]["0.5"] == pytest.approx(exp["wait_tail_class"][0][k], rel=1e-6)
        assert c["wait_quantiles"]["0.99"] == pytest.approx(exp["wait_quantile_class"][k], rel=1e-6)


@pytest.mark.parametrize(
    ("argv", "needles", "code"),
    [
        (
            ["--scenario", "five-class-erlang3", "--lam", "1.0"],
            ["324,780 phases", "GB and", "CPU-s"],
            1,
        ),
        (
            ["--scenario", "five-class-hyperexp", "--lam", "1.0"],
            ["25,263 phases", "GB and", "CPU-s (34 h)"],
            1,
        ),
        (["--scenario", "five-class-bpareto", "--lam", "1.0"], ["not phase-type"], 1),
        (["--scenario", "S5", "--lam", "2.0"], ["lambda_c = 1.88052", "stability limit"], 1),
        (["--scenario", "BPARETO", "--lam", "0.5"], ["class 1", "not phase-type"], 1),
    ],
)
def test_phase_type_refusals_are_one_line(argv, needles, code, tmp_path, capsys):
    for name, text in (("S5", S5), ("BPARETO", BPARETO)):
        if name in argv:
            path = tmp_path / f"{name}.toml"
            path.write_text(text)
            argv = [str(path) if a == name else a for a in argv]
    status, out, err = _run(["mjqm", "exact", *argv, "--json"], capsys)
    assert status == code and json.loads(out) == {"error": err.strip(), "exit_status": code}
    lines = err.strip().splitlines()
    assert len(lines) == 1 and ": error: " in lines[0], err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
