"""Command-line conventions (issue 20): every command refuses a bad argument with its exit
status and one line without a traceback (and a JSON object on stdout under ``--json``);
``--version``; ``--help`` with defaults and the scenario names; ``--debug``; ``-q``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jaxqueue import __version__
from jaxqueue.cli import _leaves, build_parser, main


def _commands() -> list[list[str]]:
    """The words of every command (``["mjqm", "exact"]``, ``["demo"]``, ...)."""
    out = []
    for leaf in _leaves(build_parser()):
        out.append(leaf.prog.split()[1:])
    return out


COMMANDS = _commands()

# one bad value per command that the parser accepts but a file or a model refuses (exit 1)
RUNTIME = {
    "bf solve": ["--pool", "{d}/missing.json", "--rho", "0.5"],
    "mjqm exact": ["--scenario", "five-class-exp", "--lam", "9"],
    "mjqm sensitivity": ["--scenario", "five-class-exp", "--lam", "9"],
    "mjqm stability": ["--scenario", "{d}/missing.toml"],
    "mjqm simulate": ["--scenario", "five-class-exp", "--lam", "9"],
    "mjqm sample": ["--scenario", "five-class-exp", "--lam", "9"],
    "mjqm compare": ["--scenario", "{d}/missing.toml"],
    "sched simulate": ["--pool", "m-model-sym", "--rho", "1.5"],
    "network solve": ["--spec", "{d}/missing.json"],
    "reproduce": ["mjsre", "--out", "/proc/forbidden"],
    "sweep": ["{d}/missing.toml", "--out", "{d}/out"],
    "workload fit": ["{d}/missing.swf", "--out", "{d}/out.toml"],
}


def test_every_command_is_listed():
    names = {" ".join(c) for c in COMMANDS}
    assert set(RUNTIME) | {"optimize", "demo"} == names, names


def _check_error(status, want, out, err, as_json):
    assert status == want, (status, err[-500:])
    assert "Traceback" not in err and "Traceback" not in out
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and ": error: " in lines[-1], err
    if as_json:
        assert json.loads(out) == {"error": lines[-1], "exit_status": want}
    else:
        assert out == ""


@pytest.mark.parametrize("words", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
@pytest.mark.parametrize("as_json", [False, True])
def test_unknown_option_is_a_usage_error(words, as_json, tmp_path, capsys):
    """A well-formed command line plus one unknown option."""
    name = " ".join(words)
    good = {**RUNTIME, "optimize": ["--case", "capacity-m-model"], "demo": []}[name]
    argv = [*words, *(a.replace("{d}", str(tmp_path)) for a in good), "--no-such-option"]
    status = main([*argv, *(["--json"] if as_json else [])])
    out, err = capsys.readouterr()
    _check_error(status, 2, out, err, as_json)
    assert "--no-such-option" in err


@pytest.mark.parametrize("words", sorted(RUNTIME), ids=sorted(RUNTIME))
def test_a_refused_value_is_a_runtime_error(words, tmp_path, capsys):
    argv = [*words.split(), *(a.replace("{d}", str(tmp_path)) for a in RUNTIME[words])]
    status = main([*argv, "--json"])
    out, err = capsys.readouterr()
    _check_error(status, 1, out, err, True)


def test_every_command_takes_json_and_global_options_internal():
    for leaf in _leaves(build_parser()):
        options = {s for a in leaf._actions for s in a.option_strings}
        assert {"--json", "--debug", "-q", "-v", "--help"} <= options, leaf.prog
    optimize = next(p for p in _leaves(build_parser()) if p.prog.endswith("optimize"))
    assert "--seed" in {s for a in optimize._actions for s in a.option_strings}


def test_version_and_help(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"jaxqueue {__version__}"
    assert main(["mjqm", "simulate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "five-class-exp" in text and "two-class-256" in text  # the scenario names
    assert "(default: 20000)" in text and "(default: 256)" in text  # --jobs, --replications
    assert main(["bf", "solve", "--help"]) == 0
    assert "m-model-sym" in capsys.readouterr().out


def test_internal_errors_are_one_line_unless_debug(monkeypatch, capsys):
    import jaxqueue.cli._bf as bf

    def broken(args):
        raise RuntimeError("something broke\nsecond line")

    monkeypatch.setattr(bf, "run_solve", broken)
    argv = ["bf", "solve", "--pool", "m-model-sym", "--rho", "0.5"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        "jaxqueue: error: RuntimeError: something broke (--debug shows the traceback)"
    )
    assert main(["--debug", *argv]) == 1
    assert "Traceback" in capsys.readouterr().err
    assert main([*argv, "--debug"]) == 1  # after the command too
    assert "Traceback" in capsys.readouterr().err


def test_quiet_and_verbose(capsys):
    argv = ["bf", "solve", "--pool", "m-model-sym", "--rho", "0.5", "--json"]
    assert main(argv) == 0
    assert "bf solve: 2 classes" in capsys.readouterr().err
    assert main([*argv, "-q"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and json.loads(captured.out)["T_mean"] > 0
    assert main(["-v", *argv]) == 0
    assert "bf solve: 2 classes" in capsys.readouterr().err


def test_progress_line_on_stderr_leaves_stdout_alone_internal(monkeypatch, capsys):
    """The live progress line (forced: stderr is not a terminal here) goes to stderr, the log
    lines above it; stdout keeps exactly the JSON object; ``-q`` turns it off."""
    monkeypatch.setenv("JAXQUEUE_PROGRESS", "1")
    argv = ["sched", "simulate", "--pool", "m-model-sym", "--rho", "0.5", "--law", "exp"]
    argv += ["--replications", "4", "--jumps", "2000", "--json"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["delay"] > 0
    assert "jaxqueue sched simulate: 00:0" in err and "sched simulate: 4 replications" in err
    # the fraction done: 2,000 warm-up and 2,000 measured jumps in blocks of 1,000
    assert "2/4 blocks of 1000 jumps (50%)" in err and "4/4 blocks of 1000 jumps (100%)" in err
    assert main([*argv, "-q"]) == 0
    quiet, err = capsys.readouterr()
    assert "00:0" not in err and "replications x" not in err  # warnings only
    # the run told its fraction on the bar gives the numbers of one run without a bar
    timed = ("jumps_per_s", "elapsed_s")
    assert {k: v for k, v in json.loads(out).items() if k not in timed} == {
        k: v for k, v in json.loads(quiet).items() if k not in timed
    }


def test_demo_json_is_one_object_internal(monkeypatch, capsys):
    """``demo --json``: one JSON object with a section per step, each command's own JSON
    object inside (the tour shortened to one command here; the text sections stubbed)."""
    import jaxqueue.cli._bf as bf
    import jaxqueue.cli._demo as demo
    import jaxqueue.studies.bf_recursive as structured

    command = "mjqm stability --scenario five-class-exp"  # the tour's first step
    monkeypatch.setattr(demo, "_COMMANDS", [("stability", command)])
    monkeypatch.setattr(demo, "_network_demo", lambda: "network")
    monkeypatch.setattr(bf, "demo_text", lambda: "bf")
    monkeypatch.setattr(structured, "demo_text", lambda: "structured")
    assert main(["demo", "--json", "--seed", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["seed"] == 5 and [s["text"] for s in out["sections"][:3]] == [
        "bf", "structured", "network"
    ]  # fmt: skip
    last = out["sections"][-1]
    assert last["command"] == f"jaxqueue {command}" and last["result"]["lambda_c"] > 0


def test_sched_json_reports_its_elapsed_time_as_the_other_commands(capsys):
    status = main(
        ["sched", "simulate", "--pool", "m-model-sym", "--rho", "0.5", "--json"]
        + ["--replications", "2", "--jumps", "200", "-q"]
    )
    out = json.loads(capsys.readouterr().out)
    assert status in (0, 3) and out["elapsed_s"] > 0, out


def test_parser_imports_no_model_internal():
    """Building the parser (``jaxqueue --help``, usage errors) imports neither jax nor a model,
    and the case names it offers are the optimisation cases."""
    code = (
        "import sys; from jaxqueue.cli import build_parser; build_parser(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'equinox')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    from jaxqueue.cli._optimize import CASE_NAMES
    from jaxqueue.optimize import CASES

    assert CASE_NAMES == tuple(sorted(CASES))


def test_package_attributes_load_on_use():
    import jaxqueue

    assert jaxqueue.simulate_mjqm is jaxqueue.mjqm.simulate
    assert jaxqueue.structured is jaxqueue.pools.structured
    assert set(jaxqueue.__all__) <= set(dir(jaxqueue))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        jaxqueue.nope  # noqa: B018
