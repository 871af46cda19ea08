"""``jaxqueue bf solve``: presets, files, inline pools, JSON keys, errors."""

import json

import pytest

from jaxqueue.cli import main
from jaxqueue.pools import m_model
from tests.helpers import assert_close

KEYS = {"psi", "L", "T", "psi_server", "L_total", "T_mean", "lam", "gamma", "busy_servers"}


def run_json(capsys, argv):
    assert main(argv + ["--json"]) == 0
    out = capsys.readouterr().out
    return json.loads(out)


def test_preset_sym_json_matches_closed_form(capsys):
    out = run_json(capsys, ["bf", "solve", "--pool", "m-model-sym", "--rho", "0.8"])
    assert KEYS <= set(out) and "stability_margin" in out and "psi_class" in out
    lam = 0.8 * 3 / 2
    ref = m_model(lam, lam)
    assert_close(out["T"], ref.T, rtol=1e-10)
    assert_close(out["psi"], ref.psi, rtol=1e-10)
    assert_close(out["T_mean"], out["L_total"] / (2 * lam), rtol=1e-12)
    assert_close(out["stability_margin"], 1 / 0.8, rtol=1e-10)


def test_preset_asym_and_table(capsys):
    out = run_json(capsys, ["bf", "solve", "--pool", "m-model-asym", "--rho", "0.5"])
    ref = m_model(0.5, 0.5, 1.0, 0.0, 1.0)
    assert_close(out["T"], ref.T, rtol=1e-10)
    assert len(out["psi_server"]) == 2
    assert main(["bf", "solve", "--pool", "m-model-asym", "--rho", "0.5"]) == 0
    assert "psi_server" in capsys.readouterr().out


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_pool_file_and_inline(capsys, tmp_path, suffix):
    path = tmp_path / f"pool{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps({"server_sets": [[0, 2], [1, 2]], "mu": [1, 1, 1]}))
    else:
        path.write_text("server_sets = [[0, 2], [1, 2]]\nmu = [1.0, 1.0, 1.0]\n")
    a = run_json(capsys, ["bf", "solve", "--pool", str(path), "--lam", "0.7,1.1"])
    b = run_json(
        capsys,
        ["bf", "solve", "--server-sets", "[[0,2],[1,2]]", "--mu", "[1,1,1]", "--lam", "[0.7, 1.1]"],
    )
    ref = m_model(0.7, 1.1)
    assert_close(a["L"], ref.L, rtol=1e-10)
    assert_close(b["L"], ref.L, rtol=1e-10)
    assert_close(a["psi_server"], ref.psi_server, rtol=1e-10)


def test_errors_exit_2_or_1(capsys):
    """Issue 20: 2 for a command line that is not well formed, 1 for a refusal by the model."""
    assert main(["bf", "solve", "--pool", "m-model-sym", "--lam", "2.5,0.1"]) == 1
    err = capsys.readouterr().err
    assert "bottleneck classes [0]" in err and "servers [0, 2]" in err
    assert main(["bf", "solve", "--pool", "no-such-preset", "--rho", "0.5"]) == 2
    assert "unknown pool preset" in capsys.readouterr().err
    assert main(["bf", "solve", "--server-sets", "[[0],[]]", "--mu", "[1]", "--rho", "0.5"]) == 1
    assert "server_sets[1] is empty" in capsys.readouterr().err
    assert main(["bf", "solve", "--pool", "m-model-sym"]) == 2
    assert "--rho" in capsys.readouterr().err


def test_cli_persistent_compilation_cache(tmp_path):
    # the command line keeps XLA compilations in $JAXQUEUE_CACHE_DIR; a second run reads them
    # back and gives the same answer. A simulation: its kernel compiles well above the cache's
    # 0.1 s threshold even with the suite's fast-compile flags on a fast machine
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "JAXQUEUE_NO_CACHE"}
    env["JAXQUEUE_CACHE_DIR"] = str(tmp_path / "xla")
    cmd = [sys.executable, "-m", "jaxqueue", "mjqm", "simulate", "--scenario", "five-class-exp"]
    cmd += ["--lam", "1.0", "--jobs", "2000", "--replications", "8", "--start", "empty", "--json"]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    entries = sorted(p.name for p in (tmp_path / "xla").iterdir())
    assert entries, "no compilation was cached"
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    a, b = json.loads(first), json.loads(second)
    assert a.pop("elapsed_s") > 0 and b.pop("elapsed_s") > 0
    a.pop("rounds"), b.pop("rounds")  # per-round timings
    assert a == b
    assert set(entries) <= {p.name for p in (tmp_path / "xla").iterdir()}


def test_lam_with_the_wrong_length_is_refused_not_broadcast(capsys):
    """Issue 16: one --lam value for a two-class pool is refused with one line (it used to
    be copied to every class)."""
    status = main(["bf", "solve", "--pool", "m-model-sym", "--lam", "0.5"])
    err = capsys.readouterr().err
    assert status == 2 and "--lam has 1 rate(s) but the pool has 2 classes" in err
    assert len(err.strip().splitlines()) == 1
