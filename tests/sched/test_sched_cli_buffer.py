"""``sched simulate``'s job buffer on the command line: its cap is an option (a
``--queue-size`` above the default cap is taken, not refused) and an overflow names its cause,
the jobs in system against the buffer."""

from __future__ import annotations

import json

from jaxqueue.cli import main

# 12 replications and a 32-job buffer: the kernel configuration of tests/sched/test_sched.py's
# M-model runs (one compile for both files)
BASE = ["sched", "simulate", "--pool", "m-model-sym", "--law", "exp", "--replications", "12"]


def test_queue_size_above_the_default_cap_is_taken(monkeypatch, capsys):
    import jaxqueue.sched

    seen = {}

    def record(*args, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("recorded")

    monkeypatch.setattr(jaxqueue.sched, "simulate", record)
    assert main([*BASE, "--rho", "0.5", "--queue-size", "16384"]) == 1
    assert "recorded" in capsys.readouterr().err
    assert seen["queue_size"] == 16384 and seen["max_queue_size"] >= 16384, seen


def test_overflow_names_the_jobs_in_system_and_the_cap(capsys):
    argv = [*BASE, "--rho", "0.95", "--jumps", "20000", "--queue-size", "32"]
    assert main([*argv, "--max-queue-size", "32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "overflow", out
    reason = out["status_reason"]
    assert "jobs in system" in reason and "--max-queue-size" in reason, reason
    assert "saturation" not in reason
    assert main([*argv, "--max-queue-size", "2"]) == 2
    assert "--max-queue-size" in capsys.readouterr().err
