"""Bad input, caught everywhere (issue 16): a table of bad command lines and API calls, each
with its exit status (or exception) and a fragment of the one line it must print.

Every command-line case runs in this process through ``jaxqueue.cli.main`` and must: return
its exit status (2 for a command line that is not well formed, 1 for one that a file or a model
refuses), print nothing on stdout, print no traceback, and end its
stderr with one line ``jaxqueue...: error: ...`` holding the fragment. The fragments say what
the message must name (the option, the file and field, the limit), written from the rule, not
copied from the output. The cases are chosen to fail before any long computation.
"""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxqueue.cli import main

S5 = ("--scenario", "five-class-exp")
Q2 = [[[0, 1], [1]], [[2, 3]]]
GOOD_NET = {
    "queues": Q2,
    "mu": [1.0, 1.2, 0.8, 1.5],
    "routing": [[0.1, 0.0, 0.5], [0.0, 0.2, 0.3], [0.2, 0.1, 0.0]],
    "nu": [0.25, 0.2, 0.1],
}
EXP = 'law = "exponential"\nmean = 1.0\n'

# file name -> contents (text); "adir" is a folder
FILES = {
    "broken.json": '{"servers": 4, "classes": [',
    "unknown_key.toml": f"servers = 4\n[[classes]]\ncores = 1\nprob = 1.0\n{EXP}bogus = 3\n",
    "wrong_type.toml": f'servers = "four"\n[[classes]]\ncores = 1\nprob = 1.0\n{EXP}',
    "probsum.toml": f"servers = 4\n[[classes]]\ncores = 1\nprob = 0.7\n{EXP}",
    "too_many_cores.toml": f"servers = 4\n[[classes]]\ncores = 8\nprob = 1.0\n{EXP}",
    "neg_mean.toml": 'servers = 4\n[[classes]]\ncores = 1\nprob = 1.0\nlaw = "exponential"\n'
    "mean = -1.0\n",
    "nan_mean.toml": 'servers = 4\n[[classes]]\ncores = 1\nprob = 1.0\nlaw = "exponential"\n'
    "mean = nan\n",
    "bad_law.toml": 'servers = 4\n[[classes]]\ncores = 1\nprob = 1.0\nlaw = "weibull"\n'
    "mean = 1.0\n",
    "zero_cores.toml": f"servers = 4\n[[classes]]\ncores = 0\nprob = 1.0\n{EXP}",
    "zero_servers.toml": f"servers = 0\n[[classes]]\ncores = 1\nprob = 1.0\n{EXP}",
    "no_classes.toml": "servers = 4\nclasses = []\n",
    "erlang_no_k.toml": 'servers = 4\n[[classes]]\ncores = 1\nprob = 1.0\nlaw = "erlang"\n'
    "mean = 1.0\n",
    "bp_order.toml": 'servers = 4\n[[classes]]\ncores = 1\nprob = 1.0\nlaw = "bounded-pareto"\n'
    "xmin = 2.0\nxmax = 1.0\nshape = 1.5\n",
    "syntax.toml": "this is = = not toml\n",
    "empty.toml": "",
    "empty.json": "{}",
    "list.json": "[1, 2, 3]",
    "net_keys.json": json.dumps({"pools": 3}),
    "net_neg_mu.json": json.dumps({**GOOD_NET, "mu": [-1.0, 1.2, 0.8, 1.5]}),
    "net_unstable.json": json.dumps({**GOOD_NET, "nu": [25, 20, 10]}),
    "net_rows.json": json.dumps(
        {**GOOD_NET, "routing": [[0.9, 0.5, 0.5], [0, 0.2, 0.3], [0.2, 0.1, 0]]}
    ),
    "net_shape.json": json.dumps({**GOOD_NET, "routing": [[0.1, 0.0], [0.0, 0.2]]}),
    "net_nan_nu.json": json.dumps(GOOD_NET).replace('"nu": [0.25', '"nu": [NaN'),
    "net_neg_nu.json": json.dumps({**GOOD_NET, "nu": [-0.25, 0.2, 0.1]}),
    "net_pop_neg.json": json.dumps(
        {**{k: GOOD_NET[k] for k in ("queues", "mu", "routing")}, "population": -3}
    ),
    "net_pop_huge.json": json.dumps(
        {
            "queues": Q2,
            "mu": GOOD_NET["mu"],
            "routing": [[0, 1, 0], [0, 0, 1], [1, 0, 0]],
            "population": 1_000_000,
        }
    ),
    "net_oob.json": json.dumps({**GOOD_NET, "queues": [[[0, 9], [1]], [[2, 3]]]}),
    "net_no_mu.json": json.dumps({k: v for k, v in GOOD_NET.items() if k != "mu"}),
    "net_str_mu.json": json.dumps({**GOOD_NET, "mu": "fast"}),
    "net_extra.json": json.dumps({**GOOD_NET, "extra": 1}),
    "net_empty_set.json": json.dumps({**GOOD_NET, "queues": [[[], [1]], [[2, 3]]]}),
    "net_40.json": json.dumps(
        {"queues": [[list(range(40))]], "mu": [1.0] * 40, "routing": [[0.0]], "nu": [20.0]}
    ),
    "pool_neg_mu.json": json.dumps({"server_sets": [[0, 1], [1]], "mu": [-1.0, 1.0]}),
    "pool_oob.json": json.dumps({"server_sets": [[0, 5], [1]], "mu": [1.0, 1.0]}),
    "pool_empty.json": json.dumps({"server_sets": [[], [1]], "mu": [1.0, 1.0]}),
    "pool_extra.json": json.dumps({"server_sets": [[0, 1], [1]], "mu": [1.0, 1.0], "foo": 2}),
    "pool_str.json": json.dumps({"server_sets": "abc", "mu": [1.0, 1.0]}),
    "pool_40.json": json.dumps({"server_sets": [list(range(40)), [0]], "mu": [1.0] * 40}),
    "pool_no_sets.json": json.dumps({"mu": [1.0, 1.0]}),
}


def _cases():
    """``(id, argv with {d} for the files' folder, fragment, exit status)``: 2 for a command
    line that is not well formed (``add``), 1 for one that a file or a model refuses
    (``runtime``)."""
    c = []

    def add(fragment, *argv, status=2):
        c.append((" ".join(argv)[:90], list(argv), fragment, status))

    def runtime(fragment, *argv):
        add(fragment, *argv, status=1)

    gt0 = "expected a finite number > 0"

    # --- mjqm exact: rates, loads, refusals
    for lam in ("-1", "0", "nan", "inf"):
        add(f"argument --lam: {gt0}", "mjqm", "exact", *S5, "--lam", lam)
    for lam in ("1e9", "2.5", "1.80085536"):
        runtime("stability limit lambda_c", "mjqm", "exact", *S5, "--lam", lam)
    runtime("too close", "mjqm", "exact", *S5, "--lam", "1.8008553")
    add(f"argument --lam: {gt0}, got 'abc'", "mjqm", "exact", *S5, "--lam", "abc")
    for load in ("-0.5", "0", "nan"):
        add(f"argument --load: {gt0}", "mjqm", "exact", *S5, "--load", load)
    for load in ("1", "1.5"):
        runtime("stability limit lambda_c", "mjqm", "exact", *S5, "--load", load)
    add("exactly one of --lam", "mjqm", "exact", *S5)
    add("exactly one of --lam", "mjqm", "exact", *S5, "--lam", "1", "--load", "0.5")
    add("unknown scenario 'nosuch'", "mjqm", "exact", "--scenario", "nosuch", "--lam", "1")
    runtime("324,780 phases", "mjqm", "exact", "--scenario", "five-class-erlang3", "--lam", "1")
    runtime("phases", "mjqm", "exact", "--scenario", "borg-cell-b", "--lam", "1")
    add("the following arguments are required: --scenario", "mjqm", "exact", "--lam", "1")
    # --- workload files: the file and the field
    for name, fragment in (
        ("broken.json", "broken.json: invalid JSON"),
        ("unknown_key.toml", "classes[0].bogus: unknown key"),
        ("wrong_type.toml", "servers: must be an integer"),
        ("probsum.toml", "sum to 0.7"),
        ("too_many_cores.toml", "classes[0].cores: 8 exceeds servers"),
        ("neg_mean.toml", "classes[0].mean: must be > 0"),
        ("nan_mean.toml", "classes[0].mean: must be finite"),
        ("bad_law.toml", "classes[0].law: unknown law 'weibull'"),
        ("zero_cores.toml", "classes[0].cores: must be >= 1"),
        ("zero_servers.toml", "servers: must be >= 1"),
        ("no_classes.toml", "classes: empty"),
        ("erlang_no_k.toml", "classes[0].k: missing"),
        ("bp_order.toml", "classes[0].xmax: must be > xmin"),
        ("syntax.toml", "syntax.toml: invalid TOML"),
        ("empty.toml", "servers: missing"),
        ("empty.json", "servers: missing"),
        ("list.json", "top level: must be a table"),
        ("adir", "adir: is a directory"),
        ("missing.toml", "missing.toml: no such file"),
        ("net_keys.json", "pools: unknown key"),
    ):
        runtime(fragment, "mjqm", "exact", "--scenario", "{d}/" + name, "--lam", "0.5")
    for name, fragment in (
        ("broken.json", "invalid JSON"),
        ("probsum.toml", "sum to 0.7"),
        ("adir", "is a directory"),
        ("missing.toml", "no such file"),
        ("neg_mean.toml", "classes[0].mean"),
    ):
        runtime(fragment, "mjqm", "stability", "--scenario", "{d}/" + name)
        runtime(fragment, "mjqm", "simulate", "--scenario", "{d}/" + name, "--lam", "0.5")
        runtime(fragment, "mjqm", "sample", "--scenario", "{d}/" + name, "--lam", "0.5")
    # --- options checked when parsed: the option and the rule
    e3 = ("--scenario", "five-class-erlang3")
    for opt, vals, rule in (
        ("--rel-tol", ("0", "-0.1", "nan", "2"), "a number in (0, 1)"),
        ("--replications", ("0", "-4", "1"), "an integer >= 2"),
        ("--level", ("0", "1", "1.5", "-0.2", "nan"), "a number in (0, 1)"),
        ("--max-jobs", ("0", "-5"), "an integer >= 1"),
    ):
        for v in vals:
            add(f"argument {opt}: expected {rule}", "mjqm", "stability", *e3, opt, v)
    add("argument --dtype: invalid choice", "mjqm", "stability", *S5, "--dtype", "float16")
    for lam in ("-1", "0", "nan", "inf"):
        add(f"argument --lam: {gt0}", "mjqm", "simulate", *S5, "--lam", lam)
    runtime("stability limit", "mjqm", "simulate", *S5, "--lam", "5")
    for opt, vals in (
        ("--jobs", ("0", "-10", "nan")),
        ("--replications", ("0", "-1", "1")),
        ("--max-seconds", ("0", "-1", "nan")),
        ("--level", ("0", "1", "2")),
        ("--max-buffer", ("0", "-1")),
    ):
        for v in vals:
            add(f"argument {opt}: expected", "mjqm", "simulate", *S5, "--lam", "1.0", opt, v)
    for pol, fragment in (
        ("nosuch", "unknown policy 'nosuch'"),
        ("window", "window needs an integer W >= 1"),
        ("window:0", "window needs an integer W >= 1"),
        ("window:-3", "window needs an integer W >= 1"),
        ("window:abc", "window needs an integer W >= 1"),
        ("fcfs:3", "fcfs takes no parameter"),
        ("msf:2", "msf takes no parameter"),
        ("", "unknown policy ''"),
    ):
        add(fragment, "mjqm", "simulate", *S5, "--lam", "1.0", "--policy", pol)
    for opt, v in (("--start", "empty"), ("--dtype", "float32"), ("--max-seconds", "10")):
        add(
            f"{opt} apply to --policy fcfs",
            "mjqm",
            "simulate",
            *S5,
            "--lam",
            "1.0",
            "--policy",
            "first-fit",
            opt,
            v,
        )
    add(
        "--max-buffer applies to the event engine",
        "mjqm",
        "simulate",
        *S5,
        "--lam",
        "1.0",
        "--max-buffer",
        "64",
    )
    add("the arguments --scenario and --lam are required", "mjqm", "simulate", *S5)
    for opt, v, fragment, status in (
        ("--lam", "-1", f"argument --lam: {gt0}", 2),
        ("--lam", "0", f"argument --lam: {gt0}", 2),
        ("--lam", "nan", f"argument --lam: {gt0}", 2),
        ("--lam", "5", "stability limit", 1),
        ("--load", "0", f"argument --load: {gt0}", 2),
        ("--load", "-1", f"argument --load: {gt0}", 2),
        ("--load", "1", "at or beyond the stability limit lambda_c", 1),
        ("--load", "1.2", "stability limit", 1),
    ):
        add(fragment, "mjqm", "sample", *S5, opt, v, status=status)
    for opt, vals in (
        ("--samples", ("0", "-3", "1")),
        ("--ell0", ("0", "-8")),
        ("--max-ell", ("0", "-1")),
        ("--bias-tol", ("0", "-1", "nan")),
        ("--max-work", ("0", "-1")),
        ("--level", ("0", "1")),
    ):
        for v in vals:
            add(f"argument {opt}: expected", "mjqm", "sample", *S5, "--lam", "1.0", opt, v)
    add(
        "argument --max-seconds: expected a number of seconds >= 0",
        "mjqm",
        "sample",
        *S5,
        "--lam",
        "1.0",
        "--max-seconds",
        "-2",
    )
    add(
        "need 1 <= ell0 <= max_ell",
        "mjqm",
        "sample",
        *S5,
        "--lam",
        "1.0",
        "--ell0",
        "64",
        "--max-ell",
        "8",
    )
    # --- mjqm compare
    for loads, fragment in (
        ("", "--loads must be"),
        ("0", "positive fractions"),
        ("-0.5", "positive fractions"),
        ("abc", "comma-separated numbers"),
        ("0.5,,0.7", "comma-separated numbers"),
        ("nan", "positive fractions"),
        ("inf", "positive fractions"),
    ):
        add(fragment, "mjqm", "compare", *S5, "--loads", loads)
    for pols, fragment in (
        ("", "names no policy"),
        ("nosuch", "unknown policy 'nosuch'"),
        ("fcfs,nosuch", "unknown policy 'nosuch'"),
        ("window:0", "window needs an integer W >= 1"),
    ):
        add(fragment, "mjqm", "compare", *S5, "--policies", pols)
    add("argument --jobs: expected an integer >= 10", "mjqm", "compare", *S5, "--jobs", "5")
    add("argument --replications: expected", "mjqm", "compare", *S5, "--replications", "0")
    runtime(
        "the folder /nonexistent/dir does not exist",
        "mjqm",
        "compare",
        *S5,
        "--loads",
        "0.5",
        "--plot",
        "/nonexistent/dir/x.png",
    )
    runtime(
        "is a folder, not a file", "mjqm", "compare", *S5, "--loads", "0.5", "--plot", "{d}/adir"
    )
    # --- bf solve
    for pool, fragment in (
        ("nosuch", "unknown pool preset 'nosuch'"),
        ("{d}/missing.json", "missing.json: no such file"),
        ("{d}/adir", "adir: is a directory"),
        ("{d}/broken.json", "invalid JSON"),
        ("{d}/pool_neg_mu.json", "mu must be finite and > 0"),
        ("{d}/pool_oob.json", "server_sets[0] has server indices [5]"),
        ("{d}/pool_empty.json", "server_sets[0] is empty"),
        ("{d}/pool_extra.json", "unknown key(s) ['foo']"),
        ("{d}/pool_str.json", "server_sets must be a sequence"),
        ("{d}/pool_no_sets.json", "needs a 'server_sets' entry"),
        ("{d}/pool_40.json", "2^40"),
        ("random:K=0,d=2", "K must be >= 1"),
        ("random:K=10,d=20", "degrees must lie in [1, K=10]"),
        ("random:K=10", "lacks d="),
        ("random:K=abc,d=2", "expected integers"),
        ("line:K=401", "lacks d="),
        ("m-model-sym:x=1", "unknown pool structure"),
    ):
        status = 1 if pool.startswith("{d}") else 2  # files: runtime; names, structures: usage
        add(fragment, "bf", "solve", "--pool", pool, "--rho", "0.5", status=status)
    ge0 = "argument --rho: expected a finite number >= 0"
    for rho, fragment, status in (
        ("-0.5", ge0, 2),
        ("nan", ge0, 2),
        ("inf", ge0, 2),
        ("1", "unstable arrival rates", 1),
        ("1.5", "unstable arrival rates", 1),
        ("abc", ge0, 2),
    ):
        add(fragment, "bf", "solve", "--pool", "m-model-sym", "--rho", rho, status=status)
    for lam, fragment, status in (
        ("[-1, 1]", "--lam: expected comma-separated finite numbers >= 0", 2),
        ("[1]", "--lam has 1 rate(s) but the pool has 2 classes", 2),
        ("[nan, 1]", "--lam: expected comma-separated", 2),
        ("abc", "--lam: expected comma-separated", 2),
        ("[]", "--lam has 0 rate(s)", 2),
        ("[5, 5]", "unstable arrival rates", 1),
    ):
        add(fragment, "bf", "solve", "--pool", "m-model-sym", "--lam", lam, status=status)
    add("give the arrival rates", "bf", "solve", "--pool", "m-model-sym")
    add(
        "not allowed with argument --rho",
        "bf",
        "solve",
        "--pool",
        "m-model-sym",
        "--rho",
        "0.5",
        "--lam",
        "[1, 1]",
    )
    add(
        "--mu: expected comma-separated finite numbers > 0",
        "bf",
        "solve",
        "--pool",
        "m-model-sym",
        "--rho",
        "0.5",
        "--mu",
        "[-1, 1, 1]",
    )
    add(
        "--mu: expected comma-separated",
        "bf",
        "solve",
        "--pool",
        "m-model-sym",
        "--rho",
        "0.5",
        "--mu",
        "x",
    )
    add("give a pool", "bf", "solve", "--rho", "0.5")
    # --- sched simulate
    sched = ("sched", "simulate", "--pool", "m-model-sym", "--law", "exp")
    for rho, fragment, status in (
        ("-0.1", f"argument --rho: {gt0}", 2),
        ("0", f"argument --rho: {gt0}", 2),
        ("nan", f"argument --rho: {gt0}", 2),
        ("1", "unstable arrival rates", 1),
        ("1.2", "unstable arrival rates", 1),
    ):
        add(fragment, *sched, "--rho", rho, status=status)
    for opt, vals in (
        ("--m", ("-1", "nan")),
        ("--replications", ("0", "-2", "1")),
        ("--jumps", ("0", "-100")),
        ("--warmup", ("-1",)),
        ("--queue-size", ("0", "-1")),
        ("--level", ("0", "1")),
    ):
        for v in vals:
            name = "--jumps/--events" if opt == "--jumps" else opt
            add(f"argument {name}: expected", *sched, "--rho", "0.5", opt, v)
    add(
        "argument --law: invalid choice",
        "sched",
        "simulate",
        "--pool",
        "m-model-sym",
        "--law",
        "pareto",
        "--rho",
        "0.5",
    )
    for pool, fragment in (
        ("nosuch", "--pool 'nosuch': not a preset"),
        ("{d}/missing.json", "missing.json: no such file"),
        ("{d}/adir", "adir: is a directory"),
        ("{d}/broken.json", "invalid JSON"),
        ("random:S=0,d=2", "K must be a positive integer number of servers"),
        ("random:S=4,d=9", "degrees must lie in [1, K=4]"),
    ):
        status = 1 if pool.startswith("{d}") else 2
        argv = ("sched", "simulate", "--pool", pool, "--law", "exp", "--rho", "0.5")
        add(fragment, *argv, status=status)
    # --- network solve
    for name, fragment in (
        ("missing.json", "missing.json: no such file"),
        ("adir", "adir: is a directory"),
        ("broken.json", "invalid JSON"),
        ("net_keys.json", "unknown keys ['pools']"),
        ("net_neg_mu.json", "mu: rates and probabilities must be >= 0"),
        ("net_unstable.json", "pool 0 is overloaded"),
        ("net_rows.json", "routing: row 0 sums to 1.9"),
        ("net_shape.json", "routing: expected shape (3, 3)"),
        ("net_nan_nu.json", "nu: contains non-finite values"),
        ("net_neg_nu.json", "nu: rates and probabilities must be >= 0"),
        ("net_pop_neg.json", "population: must be >= 1"),
        ("net_pop_huge.json", "population: N = 1000000"),
        ("net_oob.json", "server 9 out of range"),
        ("net_no_mu.json", "missing keys ['mu']"),
        ("net_str_mu.json", "mu: not a numeric array"),
        ("net_extra.json", "unknown keys ['extra']"),
        ("net_empty_set.json", "non-empty list of server indices"),
        ("net_40.json", "2^40"),
        ("syntax.toml", "invalid TOML"),
        ("empty.json", "missing keys"),
        ("list.json", "must be a table"),
    ):
        runtime(fragment, "network", "solve", "--spec", "{d}/" + name)
    for n in ("0", "-5"):
        add(
            "argument --truncate: expected an integer >= 1",
            "network",
            "solve",
            "--spec",
            "{d}/net_unstable.json",
            "--truncate",
            n,
        )
    runtime(
        "population: N = 1000000",
        "network",
        "solve",
        "--spec",
        "{d}/net_unstable.json",
        "--truncate",
        "1000000",
    )
    # --- reproduce, optimize, several hosts
    runtime("--out /proc/forbidden", "reproduce", "mjsre", "--out", "/proc/forbidden")
    runtime("cannot create the folder", "reproduce", "mjsre", "--out", "{d}/empty.json")
    add("argument --case: invalid choice", "optimize", "--case", "nosuch")
    dist = ("bf", "solve", "--pool", "m-model-sym", "--rho", "0.5")
    add(
        "--coordinator: expected HOST:PORT",
        "--distributed",
        "--coordinator",
        "nohost",
        "--num-processes",
        "2",
        "--process-id",
        "0",
        *dist,
    )
    add(
        "0 <= --process-id < N",
        "--distributed",
        "--coordinator",
        "localhost:1",
        "--num-processes",
        "2",
        "--process-id",
        "5",
        *dist,
    )
    add("give all of --coordinator", "--distributed", "--num-processes", "0", *dist)
    add(
        "argument --num-processes: invalid int value",
        "--distributed",
        "--num-processes",
        "x",
        *dist,
    )
    add("argument COMMAND: invalid choice", "nosuch")
    return c


CASES = _cases()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad_input")
    for name, text in FILES.items():
        (d / name).write_text(text)
    (d / "adir").mkdir()
    return d


def test_the_table_is_large():
    """Issue 16: at least 150 bad inputs, with the API cases below."""
    assert len(CASES) + len(API_CASES) >= 150, len(CASES) + len(API_CASES)


@pytest.mark.parametrize(
    ("argv", "fragment", "status"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_command_line(argv, fragment, status, folder, capsys):
    argv = [a.replace("{d}", str(folder)) for a in argv]
    rc = main(argv)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == status, (rc, err[-500:])
    assert out == "", out[-300:]
    assert "Traceback" not in err, err[-2000:]
    assert lines and ": error: " in lines[-1], err[-500:]
    assert fragment.replace("{d}", str(folder)) in lines[-1], lines[-1]


# ------------------------------------------------------------------------------ the API
def _exact_small(lam):
    """The exact solver on the 32-phase three-class workload (one compile for the jit cases)."""
    from jaxqueue.mjqm import exact
    from jaxqueue.optimize._mjqm_cases import small_exact_workload

    return exact(small_exact_workload(), lam)


_exact_small_jit = jax.jit(_exact_small)


def _api_cases():
    from jaxqueue import scenarios
    from jaxqueue.dist import Erlang
    from jaxqueue.mjqm import Workload, exact, exact_lambda_c
    from jaxqueue.pools import preset_pool, solve

    pool = preset_pool("m-model-sym")
    wl = scenarios.get("five-class-exp")
    erl = scenarios.get("five-class-erlang3")

    def _erlang4(w, x):  # Erlang-4 services with traced means: 2,652,711 saturated phases
        return Workload(w.servers, w.cores, w.probs, [Erlang(4, v.mean_ * x) for v in w.services])

    def bf(lam):
        return lambda: solve(pool, jnp.asarray(lam)).T

    bf_jitted = jax.jit(lambda x: solve(pool, x).T)  # one compilation for the jit cases

    def bf_jit(lam):
        return lambda: bf_jitted(jnp.asarray(lam))

    def ex(lam):
        return lambda: exact(wl, lam).wait_mean

    def ex_jit(lam):
        return lambda: _exact_small_jit(jnp.asarray(lam)).wait_mean

    return [
        ("bf eager negative", bf([-1.0, 0.9]), "lam must be finite and >= 0"),
        ("bf eager nan", bf([math.nan, 0.9]), "lam must be finite and >= 0"),
        ("bf eager unstable", bf([5.0, 5.0]), "unstable arrival rates"),
        ("bf eager wrong length", bf([0.5, 0.5, 0.5]), "lam"),
        ("bf jit negative", bf_jit([-1.0, 0.9]), "lam must be finite and >= 0"),
        ("bf jit nan", bf_jit([math.nan, 0.9]), "lam must be finite and >= 0"),
        ("bf jit unstable", bf_jit([5.0, 5.0]), "unstable arrival rates"),
        (
            "bf grad negative",
            lambda: jax.grad(lambda x: solve(pool, x).T.sum())(jnp.asarray([-1.0, 0.9])),
            "lam must be finite and >= 0",
        ),
        ("exact eager negative", ex(-1.0), "lam must be positive"),
        ("exact eager beyond", ex(5.0), "stability limit"),
        ("exact eager vector", ex(jnp.ones(2)), "lam must be a scalar"),
        ("exact erlang", lambda: exact(erl, 0.5), "324,780 phases"),
        (
            "exact lambda_c erlang4 grad",
            lambda: jax.grad(lambda x: exact_lambda_c(_erlang4(erl, x)))(1.0),
            "estimated by pile growth",
        ),
        ("exact jit negative", ex_jit(-1.0), "lam must be positive"),
    ]


API_CASES = _api_cases()


@pytest.mark.parametrize(
    ("call", "fragment"), [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES]
)
def test_bad_api_call(call, fragment):
    """Eager calls raise a ``ValueError`` with the message; under ``jit`` / ``grad`` the checks
    run at run time (``eqx.error_if``) and the same message is in the error."""
    with pytest.raises(Exception) as info:
        jax.block_until_ready(call())
    assert fragment in str(info.value), str(info.value)[-1000:]
    if not isinstance(info.value, ValueError):
        assert "jit" in info.typename.lower() or "runtime" in info.typename.lower()


def test_exact_jit_beyond_the_limit_is_inf_not_a_number():
    """A traced load at or beyond lambda_c gives ``stable = False`` and infinite waits (a sweep
    may cross the limit), never a finite number (three-class-6: lambda_c = 1.688)."""
    res = _exact_small_jit(jnp.asarray(5.0))
    assert not bool(res.stable) and math.isinf(float(res.wait_mean))


# ------------------------------------------------------- short and degenerate runs are not ok
def test_forward_run_with_a_class_in_one_replication_is_unconverged():
    """A stationary start (no warm-up) and 3 jobs per replication: the rare classes of
    five-class-exp (p = 0.01) wait in fewer than 2 replications, so there is no interval
    for them and the status must not be ``ok`` (it was, with ``nan`` and zero-width
    intervals)."""
    from jaxqueue import scenarios
    from jaxqueue.mjqm import sample_backward, simulate
    from jaxqueue.mjqm.options import InitialState

    wl = scenarios.get("five-class-exp")
    key = jax.random.key(3)
    init = sample_backward(wl, 1.0, 8, key=key, bias_control=None).W
    res = simulate(
        wl,
        1.0,
        key=key,
        n_jobs=3,
        n_replications=8,
        warmup=0,
        init=InitialState(init, stationary=True),
    )
    seen = (res.counts > 0).sum()
    assert seen < 5 and res.status == "unconverged", (res.counts, res.status)


def test_capped_backward_samples_give_open_intervals(capsys):
    """Every sample capped: the status is reported on stdout (JSON) and stderr, and every
    wait interval ends at ``inf`` (the capped waits are lower bounds), never a zero-width
    interval; ``--strict`` makes it exit status 3."""
    argv = [
        "mjqm",
        "sample",
        *S5,
        "--lam",
        "1.5",
        "--max-ell",
        "64",
        "--samples",
        "100",
        "--json",
    ]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    d = json.loads(out)
    assert d["status"] == "unconverged" and "status unconverged" in err
    # --max-ell below the horizon floor of the workload at this load: said, not silent
    assert "below the horizon floor" in err and d["horizon_floor"] > 64
    assert "horizon floor" in d["status_reason"]
    assert d["wait_mean_ci"][1] is None  # inf in JSON
    assert all(c["wait_mean_ci"][1] is None for c in d["classes"])
    assert main([*argv[:-1], "--strict"]) == 3
    capsys.readouterr()


# ------------------------------------------------------------ generated specs for the readers
_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.lists(st.integers(-2, 5), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=2),
)
_BASE_WORKLOAD = {
    "name": "w",
    "servers": 6,
    "classes": [
        {"cores": 1, "prob": 0.6, "law": "exponential", "mean": 1.0},
        {"cores": 4, "prob": 0.3, "law": "erlang", "mean": 2.0, "k": 3},
        {"cores": 2, "prob": 0.1, "law": "bounded-pareto", "xmin": 1.0, "xmax": 50.0, "shape": 1.5},
    ],
}


@st.composite
def _mutated(draw, base: dict):
    """``base`` with a few keys (top level, or of a list item) deleted, replaced by any JSON
    value, or added."""
    doc = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 3))):
        holders = [doc] + [
            x for v in doc.values() if isinstance(v, list) for x in v if isinstance(x, dict)
        ]
        target = draw(st.sampled_from(holders)) if holders else doc
        keys = sorted(target) + ["extra"]
        key = draw(st.sampled_from(keys))
        if draw(st.booleans()) and key in target:
            del target[key]
        else:
            target[key] = draw(_ANY)
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated(_BASE_WORKLOAD))
def test_generated_workload_files_load_or_name_the_file(tmp_path_factory, doc):
    """A workload file either loads or is refused with one ``ValueError`` line that starts
    with the file's path; nothing else escapes (no ``KeyError``, ``TypeError``, ...)."""
    from jaxqueue import scenarios

    path = tmp_path_factory.mktemp("gen") / "w.json"
    path.write_text(json.dumps(doc))
    try:
        wl = scenarios.get(str(path))
    except ValueError as err:
        msg = str(err)
        assert msg.startswith(str(path)) and "\n" not in msg, msg
    else:
        assert wl.n_classes == len(doc["classes"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated(GOOD_NET))
def test_generated_network_specs_build_or_refuse(doc):
    """A network spec either builds or is refused with one ``ValueError`` line."""
    from jaxqueue.networks import network_from_spec

    try:
        network_from_spec(doc)
    except ValueError as err:
        assert str(err) and "\n" not in str(err), str(err)


# ------------------------------------------------------------- sizes predicted before allocating
def test_size_limits_follow_the_machine_memory(monkeypatch):
    """On a machine with 200 MB of memory, the exact MJQM of five-class-exp (274 MB and
    1.5e-10 (21 + 30) 1,147^3 = 12 CPU-s predicted) and the generic BF recursion on 22 servers
    (520 MB) are refused before allocating, naming the prediction and the limit; 16 servers
    (13 MB) pass the same check."""
    import numpy as np

    import jaxqueue._memory as memory
    from jaxqueue import scenarios
    from jaxqueue.mjqm import exact
    from jaxqueue.pools import Pool, preset_pool, solve
    from jaxqueue.pools._recursion import check_size

    monkeypatch.setattr(memory, "_machine_bytes", lambda: (2e8, "memory"))
    refusal = r"0.274 GB and 12 CPU-s \(limits: 4000 phases, 0.1 GB, half of this"
    with pytest.raises(ValueError, match=refusal):
        exact(scenarios.get("five-class-exp"), 1.0)
    big = Pool([list(range(22)), [0, 1]], np.ones(22))
    with pytest.raises(ValueError, match="above the memory limit of 0.1 GB, half of this"):
        solve(big, jnp.asarray([1.0, 1.0]))
    # the check solve makes before allocating lets 16 servers through (a 16-server solve
    # compiles for 20 s); a small pool still solves under the 200 MB limit
    check_size(16, 2, 8, None)
    small = preset_pool("m-model-sym")
    assert np.isfinite(np.asarray(solve(small, jnp.asarray([0.5, 0.5])).T)).all()


# ------------------------------------------------------------- no silent reinterpretation
def test_whole_pool_answer_is_labelled_as_such(capsys):
    """A line of more than ``PER_CLASS_LINE_MAX_K`` servers is solved for the whole pool: the
    table says so (``pool``, ``all``; it said ``class 0``) and so does stderr."""
    from jaxqueue.pools.structured._spec import PER_CLASS_LINE_MAX_K

    K = PER_CLASS_LINE_MAX_K + 1
    assert main(["bf", "solve", "--pool", f"line:K={K},d=10", "--rho", "0.5"]) == 0
    out, err = capsys.readouterr()
    header, _, first = out.splitlines()[:3]
    assert header.split()[:2] == ["class", "label"] and first.split()[1] == "all", out
    assert "metrics of the whole pool" in err
