"""One class-label convention in every table and CSV of the command line: classes numbered
from 0 in a first column named ``class`` (``type`` for the types of a random-assignment
pool), and the figures of all jobs in a last row ``all`` of the CSV."""

from __future__ import annotations

import csv
import json

import pytest

from jaxqueue.cli import main

pytest.importorskip("pandas")


def _table_labels(text: str, header: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [header])
    out = []
    for line in lines[start + 2 :]:
        if not line.strip() or ":" in line:
            break
        out.append(line.split()[0])
    return out


def _csv_labels(path, header: str) -> list[str]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [r[header] for r in rows]


def test_sched_table_and_csv_label_classes_alike(tmp_path, capsys):
    path = tmp_path / "s.csv"
    argv = ["sched", "simulate", "--pool", "m-model-sym", "--rho", "0.5", "--replications"]
    assert main([*argv, "2", "--jumps", "1000", "--csv", str(path)]) == 0
    table = _table_labels(capsys.readouterr().out, "class")
    assert table == ["0", "1", "all"] == _csv_labels(path, "class")


def test_bf_random_table_and_csv_label_types_alike(tmp_path, capsys):
    path = tmp_path / "b.csv"
    argv = ["bf", "solve", "--pool", "random:K=100,d=6+12,p=0.5+0.5", "--rho", "0.5"]
    assert main([*argv, "--csv", str(path)]) == 0
    table = _table_labels(capsys.readouterr().out, "type")
    assert table == ["0", "1"] and _csv_labels(path, "type") == ["0", "1", "all"]
    assert _csv_labels(path, "label")[:2] == ["d=6", "d=12"]


def test_mjqm_exact_table_numbers_classes_from_0(tmp_path, capsys):
    # five classes on 4 servers: a small QBD (five-class-exp's 842 phases compile for 10 s)
    spec = {
        "name": "five-small",
        "servers": 4,
        "classes": [
            {"cores": c, "prob": 0.2, "law": "exponential", "mean": 1.0} for c in (1, 1, 2, 2, 4)
        ],
    }
    path = tmp_path / "five.json"
    path.write_text(json.dumps(spec))
    assert main(["mjqm", "exact", "--scenario", str(path), "--lam", "0.5"]) == 0
    assert _table_labels(capsys.readouterr().out, "class") == ["0", "1", "2", "3", "4"]
