"""``jaxqueue sweep`` (issue 20): 2 scenarios x 2 loads x 2 methods from the command line, its
progress bar, the tidy CSV and the figures; an interrupted sweep and one whose CSV lost rows
are resumed without recomputing the finished points. Every sweep here runs workloads of one
shape (4 servers, needs 1 and 2) at 2 loads: the exact solver's and the simulator's
compilations are shared by all the tests."""

from __future__ import annotations

import csv
import json

import pytest

pytest.importorskip("pandas")

from jaxqueue.cli import _sweep, main  # noqa: E402

WORKLOAD = """name = "{name}"
servers = {s}
[[classes]]
cores = 1
prob = {p}
law = "exponential"
mean = 1.0
[[classes]]
cores = {c}
prob = {q}
law = "exponential"
mean = 1.0
"""
SWEEP = """scenarios = ["{a}", "{b}"]
loads = [0.4, 0.8]
methods = ["exact", "simulate"]
seed = 3
[simulate]
jobs = 500
replications = 4
"""


@pytest.fixture
def sweep_file(tmp_path):
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(WORKLOAD.format(name="a", s=4, c=2, p=0.7, q=0.3))
    # one name for both: Workload.name is static, a second name would compile everything again
    b.write_text(WORKLOAD.format(name="a", s=4, c=2, p=0.5, q=0.5))
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP.format(a=a, b=b))
    return path


@pytest.fixture
def no_figures(monkeypatch):
    """The figures (2 PNGs a run, about 0.3 CPU s each) are checked in
    test_sweep_runs_resumes_and_skips_finished_points, drawn after a resume in it and after an
    edit in test_sweep_file_edited_keeps_only_its_points; the other tests of the CSV and its
    manifest skip drawing them."""
    monkeypatch.setattr(_sweep, "_figures", lambda csv_path, spec, out_dir: [])


def _sweep_run(path, out, capsys):
    status = main(["sweep", str(path), "--out", str(out), "--json"])
    captured = capsys.readouterr()
    return status, json.loads(captured.out), captured.err


def _rows(out):
    with open(out / "sweep.csv", newline="") as f:
        return list(csv.DictReader(f))


def _point(row):
    return (row["scenario"], row["method"], row["policy"], row["load"])


def test_sweep_runs_resumes_and_skips_finished_points(sweep_file, tmp_path, capsys):
    out = tmp_path / "out"
    status, summary, err = _sweep_run(sweep_file, out, capsys)
    assert status == 0 and summary["points"] == 8 and summary["computed"] == 8
    assert "sweep: 100%" in err and "8/8" in err  # the progress bar, on stderr
    rows = _rows(out)
    assert len(rows) == 8 * 3 and {r["class"] for r in rows} == {"0", "1", "all"}
    assert len({_point(r) for r in rows}) == 8 and {r["run"] for r in rows} == {"1"}
    assert (out / "wait_mean.png").stat().st_size > 1000
    assert (out / "response_mean.png").stat().st_size > 1000
    for r in rows:  # exact rows: a point interval; simulated rows: an interval around the mean
        low, mean, high = (float(r[k]) for k in ("wait_mean_low", "wait_mean", "wait_mean_high"))
        assert low <= mean <= high and (low == high) == (r["method"] == "exact"), r

    # lose 3 points (a crash while writing, an edit): only they are computed again (both
    # exact points of a.toml, at the loads of one run: the same compilation)
    lost = {_point(rows[i]) for i in (0, 3, 21)}
    assert {p[1] for p in lost} == {"exact", "simulate"}
    kept = [r for r in rows if _point(r) not in lost]
    with open(out / "sweep.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(kept)
        w.writerows(rows[:2])  # the class rows of a lost point without its row "all"
        f.write("a.toml,simulate,fcfs,0.9,2.1,0,0.5")  # and a line cut by a kill
    status, summary, _ = _sweep_run(sweep_file, out, capsys)
    assert status == 0 and summary["computed"] == 3 and summary["skipped"] == 5
    again = _rows(out)
    assert again[: len(kept)] == kept  # the finished points untouched (run 1)
    redone = again[len(kept) :]
    assert {_point(r) for r in redone} == lost and {r["run"] for r in redone} == {"2"}
    before = {(_point(r), r["class"]): r["wait_mean"] for r in rows}
    assert all(before[(_point(r), r["class"])] == r["wait_mean"] for r in redone)  # same keys
    # nothing left: a third run computes nothing
    status, summary, _ = _sweep_run(sweep_file, out, capsys)
    assert summary["computed"] == 0 and len(_rows(out)) == 24


def test_interrupted_sweep_keeps_its_finished_points_internal(
    sweep_file, tmp_path, capsys, monkeypatch, no_figures
):
    out = tmp_path / "out"
    calls = []
    estimate = _sweep._estimate

    def interrupted(*args, **kwargs):
        if len(calls) == 1:
            raise KeyboardInterrupt
        calls.append(args[1])
        return estimate(*args, **kwargs)

    monkeypatch.setattr(_sweep, "_estimate", interrupted)
    assert main(["sweep", str(sweep_file), "--out", str(out)]) == 130
    assert "interrupted" in capsys.readouterr().err
    rows = _rows(out)
    assert len({_point(r) for r in rows}) == 2 + 1  # the exact loads of a.toml, 1 simulation
    monkeypatch.setattr(_sweep, "_estimate", estimate)
    status, summary, _ = _sweep_run(sweep_file, out, capsys)
    assert status == 0 and summary["computed"] == 5 and summary["skipped"] == 3
    assert _rows(out)[: len(rows)] == rows and len(_rows(out)) == 24


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('scenarios = ["five-class-exp"]\nmethods = ["exact"]\n', "exactly one of loads"),
        ('scenarios = ["nosuch"]\nloads = [0.5]\nmethods = ["exact"]\n', "unknown scenario"),
        ('scenarios = ["five-class-exp"]\nloads = [0.5]\nmethods = ["guess"]\n', "methods"),
        ('scenarios = ["five-class-exp"]\nloads = [-1]\nmethods = ["exact"]\n', "numbers > 0"),
        ('scenarios = ["five-class-exp"]\nlams = [1]\nmethods = ["exact"]\nx = 1\n', "unknown"),
        ('scenarios = ["five-class-bpareto"]\nlams = [1]\nmethods = ["exact"]\n', "not phase-type"),
        ('scenarios = ["five-class-erlang3"]\nlams = [1]\nmethods = ["exact"]\n', "324,780 phases"),
    ],
)
def test_bad_sweep_files_are_runtime_errors(text, message, tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]


EXACT = """scenarios = ["{a}"]
{grid} = [{loads}]
methods = ["exact"]
seed = 3
[simulate]
jobs = {jobs}
"""


def _exact_file(tmp_path, loads="0.5, 0.9", grid="loads", jobs=500):
    a = tmp_path / "a.toml"
    if not a.exists():
        a.write_text(WORKLOAD.format(name="a", s=4, c=2, p=0.7, q=0.3))
    path = tmp_path / "exact.toml"
    path.write_text(EXACT.format(a=a, grid=grid, loads=loads, jobs=jobs))
    return path


def _refused(argv, capsys, *words):
    assert main(argv) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert all(w in err[0] for w in words), err[0]


def test_sweep_refuses_a_changed_seed_size_grid_kind_or_workload(tmp_path, capsys, no_figures):
    """Rows computed with another seed, size, kind of grid or workload are never reused: the
    run refuses in one line, and ``--fresh`` starts over."""
    path, out = _exact_file(tmp_path), tmp_path / "out"
    argv = ["sweep", str(path), "--out", str(out), "--json"]
    assert main(argv) == 0
    capsys.readouterr()
    assert (out / "sweep-manifest.json").exists()
    _refused([*argv, "--seed", "4"], capsys, "seed", "--fresh")
    _exact_file(tmp_path, jobs=600)
    _refused(argv, capsys, "jobs", "--fresh")
    _exact_file(tmp_path, grid="lams")
    _refused(argv, capsys, "lams", "--fresh")
    _exact_file(tmp_path)
    (tmp_path / "a.toml").write_text(WORKLOAD.format(name="a", s=4, c=2, p=0.6, q=0.4))
    _refused(argv, capsys, "a.toml", "--fresh")
    assert main([*argv, "--fresh"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["computed"] == 2 and summary["skipped"] == 0
    assert main(argv) == 0 and json.loads(capsys.readouterr().out)["computed"] == 0


def test_sweep_file_edited_keeps_only_its_points(tmp_path, capsys):
    """Changed loads: the points still in the file are kept, the others leave the CSV."""
    path, out = _exact_file(tmp_path), tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out)]) == 0
    capsys.readouterr()
    _exact_file(tmp_path, loads="0.5, 0.6, 0.7")
    status, summary, err = _sweep_run(path, out, capsys)
    assert status == 0 and summary["computed"] == 2 and summary["skipped"] == 1
    assert "dropped" in err and "0.9" in err
    assert sorted({r["load"] for r in _rows(out)}) == ["0.5", "0.6", "0.7"]


def test_sweep_repairs_a_cut_row_and_refuses_a_corrupt_one(tmp_path, capsys, no_figures):
    path, out = _exact_file(tmp_path), tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out)]) == 0
    capsys.readouterr()
    text = (out / "sweep.csv").read_text()
    lines = text.splitlines(keepends=True)  # the header, then 3 rows per point
    assert len(lines) == 7
    cut = "".join(lines[:3]) + lines[3][:9]  # a kill in the middle of the first point's rows
    (out / "sweep.csv").write_text(cut)
    status, summary, err = _sweep_run(path, out, capsys)
    assert status == 0 and summary["computed"] == 2 and "repaired" in err
    assert (out / "sweep.csv").read_text().count("\n") == text.count("\n")
    lines = text.splitlines(keepends=True)
    lines[2] = lines[2].replace(",", ";", 3)  # a row damaged in the middle of the file
    (out / "sweep.csv").write_text("".join(lines))
    _refused(["sweep", str(path), "--out", str(out)], capsys, "sweep.csv", "line 3")
    (out / "sweep.csv").write_text(text)
    (out / "sweep-manifest.json").unlink()  # a CSV without its manifest: whose rows?
    _refused(["sweep", str(path), "--out", str(out)], capsys, "manifest", "--fresh")


def test_sweep_csv_has_the_cores_of_each_class(tmp_path, capsys, no_figures):
    path, out = _exact_file(tmp_path), tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out)]) == 0
    cores = {(r["class"], r["cores"]) for r in _rows(out)}
    assert cores == {("0", "1"), ("1", "2"), ("all", "")}


def test_sweep_exact_solves_phase_type_workloads(tmp_path, capsys, no_figures):
    """The exact method of a sweep takes phase-type laws (here Erlang-2): each row is
    :func:`jaxqueue.mjqm.exact` at its load, per class and overall (the solver itself is
    checked against a brute-force chain in tests/mjqm/test_exact_ph*.py)."""
    import jax
    import jax.numpy as jnp

    from jaxqueue.dist import Erlang
    from jaxqueue.mjqm import Workload, exact

    a = tmp_path / "a.toml"
    erlang = 'law = "erlang"\nmean = 1.0\nk = 2'
    a.write_text(
        WORKLOAD.format(name="a", s=3, c=2, p=0.7, q=0.3).replace(
            'law = "exponential"\nmean = 1.0', erlang
        )
    )
    path, out = tmp_path / "ph.toml", tmp_path / "out"
    path.write_text(f'scenarios = ["{a}"]\nlams = [0.5, 1.0]\nmethods = ["exact"]\n')
    assert main(["sweep", str(path), "--out", str(out)]) == 0
    wl = Workload(3, [1, 2], [0.7, 0.3], [Erlang(2, 1.0)] * 2)
    rows = _rows(out)
    assert len(rows) == 2 * 3
    res = jax.vmap(lambda lam: exact(wl, lam))(jnp.asarray([0.5, 1.0]))  # the sweep's compile
    for r in rows:
        i = [0.5, 1.0].index(float(r["lam"]))
        want = res.wait_mean[i] if r["class"] == "all" else res.wait_mean_class[i, int(r["class"])]
        assert float(r["wait_mean"]) == pytest.approx(float(want), rel=1e-9), r
