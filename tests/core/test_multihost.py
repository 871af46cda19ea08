"""Multi-host scale-out (``jax.distributed``): 2 processes x 2 host devices, CPU collectives by
gloo, give the very numbers of one process with one device (mjqm forward, backward and pile
growth, sched, and the command line, where process 0 alone prints)."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

from jaxqueue.cli import main
from tests.helpers.multihost_cases import run_cases

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(make_cmd, out_dir, n: int = 2) -> list[str]:
    """Run ``make_cmd(process_id, port)`` in ``n`` processes of 2 host devices each; stdouts.

    Outputs go to files: a process blocked on a full pipe would hold the others in
    ``jax.distributed``'s shutdown barrier.
    """
    port = _free_port()
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    files = [(out_dir / f"out{i}.txt", out_dir / f"err{i}.txt") for i in range(n)]
    procs = []
    for i, (out, err) in enumerate(files):
        with open(out, "w") as fo, open(err, "w") as fe:
            procs.append(subprocess.Popen(make_cmd(i, port), env=env, stdout=fo, stderr=fe))
    for p in procs:
        try:
            p.wait(timeout=300)
        finally:
            p.kill()
    outs = []
    for p, (out, err) in zip(procs, files, strict=True):
        assert p.returncode == 0, err.read_text()[-3000:]
        outs.append(out.read_text())
    return outs


# Every batched simulator in 2 processes (98 CPU seconds: with the slow tests); the default
# suite runs the command line's backward sampler distributed below (37 CPU seconds).
@pytest.mark.slow
def test_two_processes_give_the_single_process_numbers(tmp_path):
    outs = _launch(
        lambda i, port: [
            sys.executable,
            str(ROOT / "tests" / "helpers" / "multihost_worker.py"),
            str(i),
            "2",
            str(port),
        ],
        tmp_path,
    )
    ref = run_cases()
    for stdout in outs:
        line = [x for x in stdout.splitlines() if x.startswith("RESULT ")][-1]
        out = json.loads(line[len("RESULT ") :])
        assert out.pop("devices") == 4 and out.pop("processes") == 2
        assert out.keys() == ref.keys()
        for k in ref:
            np.testing.assert_allclose(
                np.asarray(out[k]), np.asarray(ref[k]), rtol=1e-12, err_msg=k
            )


def test_cli_distributed_prints_once_the_single_process_answer(capsys, tmp_path):
    args = ["mjqm", "sample", "--scenario", "five-class-exp", "--lam", "1.2", "--samples", "64"]
    args += ["--json"]
    outs = _launch(
        lambda i, port: (
            [sys.executable, "-m", "jaxqueue", "--distributed"]
            + ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)]
            + args
        ),
        tmp_path,
    )
    assert outs[1].strip() == ""
    got = json.loads(outs[0])
    assert main(args) == 0
    ref = json.loads(capsys.readouterr().out)
    assert got["samples"] == ref["samples"] == 64
    for c_got, c_ref in zip(got["classes"], ref["classes"], strict=True):
        assert c_got["wait_mean"] == c_ref["wait_mean"]
        assert c_got["wait_p90"] == c_ref["wait_p90"]
    assert got["wait_mean_ci"] == ref["wait_mean_ci"]
