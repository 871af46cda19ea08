"""The event engine and its policies against independent references: the plain-Python heapq
simulator (``mjqm_events.py``, job by job on the same inputs), the MJSRE forward scan
(fcfs), the exact QBD (fcfs), and a truncated CTMC over the ordered queue contents
(``mjqm_ctmc.py``)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue import scenarios
from jaxqueue.dist import BoundedPareto, Exponential, HyperExponential
from jaxqueue.mjqm import Workload, exact, simulate, simulate_policy, stability_limit
from jaxqueue.mjqm._inputs import draw_jobs  # the same jobs as the engine draws
from jaxqueue.mjqm.engines.events import _layout, _loop
from jaxqueue.mjqm.engines.events._loop import Run, _run
from jaxqueue.mjqm.options import Execution
from jaxqueue.mjqm.policies import POLICIES, parse_policy
from tests.references import mjqm_ctmc, mjqm_events
from tests.references.mjqm_ctmc_values import SMALL_CTMC

ALL = (
    "fcfs",
    "first-fit",
    "window:3",
    "preemptive-first-fit",
    "msf",
    "least-servers-first",
    "server-filling",
    "easy-backfilling",
)


def _workloads():
    exp5 = scenarios.get("five-class-exp")
    rare = Workload(
        servers=8,
        cores=(1, 8),
        probs=(0.95, 0.05),
        services=(Exponential(1.0), Exponential(4.0)),
        name="rare-8",
    )
    heavy = Workload(
        servers=6,
        cores=(1, 2, 3, 6),
        probs=(0.4, 0.3, 0.2, 0.1),
        services=(
            BoundedPareto(0.2, 50.0, 1.5),
            HyperExponential(means=(0.5, 5.0), probs=(0.9, 0.1)),
            Exponential(1.0),
            BoundedPareto(0.5, 20.0, 1.2),
        ),
        name="heavy-6",
    )
    return {"five-class-exp": (exp5, 1.2), "rare-8": (rare, 1.8), "heavy-6": (heavy, 1.6)}


def _engine_sums(wl, lam, policy, key, reps, warmup, n_jobs, B=None):
    """Per-replication sums of the kernel. ``B`` (default: the front door's first buffer) and
    ``reps`` are static: at 8 replications and the default ``B``, a policy's kernel on a
    workload is the one ``simulate_policy(..., n_replications=8)`` compiles, shared by every
    test of that policy (``n_jobs`` and the warm-up are not static)."""
    pol = parse_policy(policy)
    B = B or _layout.first_buffer(wl, _layout.layout_of(pol, wl.s, _layout.needs_of(wl)))
    st = _run(
        pol,
        wl,
        Run(
            jnp.asarray(lam, jnp.float64),
            key,
            jnp.arange(reps, dtype=jnp.int32),
            jnp.int32(warmup),
            jnp.int32(n_jobs),
            jnp.int32(100 * n_jobs),
            B,
            False,
            jnp.dtype(jnp.float64),
        ),
    )
    assert not np.any(np.asarray(st.overflow))
    return np.asarray(st.acc.resp), np.asarray(st.acc.wait), np.asarray(st.acc.cnt)


def _reference_jobs(wl, lam, policy, key, rep, warmup, n_jobs, laws=None):
    """Class, start and departure minus arrival of the measured jobs, the same jobs through the
    heapq simulator: enough extra arrivals that every measured job has left before the trace
    ends (a policy that starves a class needs more). ``laws``: the classes' duration laws in
    the reference's form (server-filling-gittins reads them); msfq's K is the workload's
    largest need."""
    m = slice(warmup, n_jobs)
    total = n_jobs + 400
    while True:
        jobs = draw_jobs(wl, lam, key, rep, jnp.arange(total), dtype=jnp.float64)
        tau = np.asarray(jobs.tau)
        arrivals = np.concatenate([[0.0], np.cumsum(tau[:-1])])
        needs = np.asarray(jobs.alpha)[:, 0].tolist()
        start, dep = mjqm_events.run_trace(
            policy,
            wl.s,
            needs,
            arrivals.tolist(),
            np.asarray(jobs.sigma).tolist(),
            classes=np.asarray(jobs.cls).tolist(),
            laws=laws,
            max_need=int(np.max(wl.cores_array[:, 0])),
        )
        start, dep = np.asarray(start), np.asarray(dep)
        if dep[m].max() < arrivals[-1]:  # the measured jobs never saw the end of the trace
            break
        total *= 2
    a = arrivals[m]
    return np.asarray(jobs.cls)[m], start[m] - a, dep[m] - a


def _reference_sums(wl, lam, policy, key, rep, warmup, n_jobs, laws=None):
    """Per-class sums of response and wait, and counts, of :func:`_reference_jobs`."""
    cls, wait, resp = _reference_jobs(wl, lam, policy, key, rep, warmup, n_jobs, laws)
    K = wl.n_classes
    return (
        np.bincount(cls, resp, minlength=K),
        np.bincount(cls, wait, minlength=K),
        np.bincount(cls, minlength=K),
    )


@pytest.mark.parametrize("policy", ALL)
@pytest.mark.parametrize(
    "name",
    [
        "five-class-exp",
        pytest.param("rare-8", marks=pytest.mark.slow),
        pytest.param("heavy-6", marks=pytest.mark.slow),
    ],
)
def test_policy_equals_heapq_simulator_job_by_job(name, policy):
    """Same jobs (counter-based inputs), same responses and waits: every policy on three
    workloads (exponential; a rare all-server class; heavy tails) against the heapq
    simulator written separately, to 1e-9."""
    wl, lam = _workloads()[name]
    key = jax.random.key(11)
    # five-class-exp shares the front door's kernel; the others queue past its first buffer
    B = None if name == "five-class-exp" else 256
    resp, wait, cnt = _engine_sums(wl, lam, policy, key, 8, 100, 1000, B=B)
    for r in range(2):  # replications 0 and 1 of 8 (counter-based: as in a run of 2)
        ref = _reference_sums(wl, lam, policy, key, r, 100, 1000)
        np.testing.assert_array_equal(cnt[:, r], ref[2])
        np.testing.assert_allclose(resp[:, r], ref[0], rtol=1e-9)
        np.testing.assert_allclose(wait[:, r], ref[1], rtol=1e-9, atol=1e-9)


@functools.cache
def _five_class_run(policy: str, reps: int = 8, warmup: int = 200, n_jobs: int = 1700):
    """``simulate_policy`` on five-class-exp at 1.2 (key 13; by default 8 replications of 1,700
    jobs, 200 of them warm-up: the kernel of the job-by-job test above) and its measured jobs
    through the heapq simulator: the result, and the class, wait and response of each job.
    Shared by the quantile tests here and in ``test_tails.py`` (seconds of compilation and
    heapq)."""
    wl, lam = _workloads()["five-class-exp"]
    key = jax.random.key(13)
    res = simulate_policy(
        wl, lam, policy, key=key, n_jobs=n_jobs, warmup=warmup, n_replications=reps
    )
    ref = [_reference_jobs(wl, lam, policy, key, r, warmup, n_jobs) for r in range(reps)]
    cls, wait, resp = (np.concatenate(x) for x in zip(*ref, strict=True))
    return res, cls, wait, resp


# msf in the default suite (the histogram and its p90 are the engine's, whatever the policy;
# fcfs and first-fit equal the heapq simulator job by job above)
@pytest.mark.parametrize(
    "policy",
    [
        pytest.param("fcfs", marks=pytest.mark.slow),
        pytest.param("first-fit", marks=pytest.mark.slow),
        "msf",
    ],
)
def test_wait_p90_from_the_histogram_matches_the_heapq_quantile(policy):
    """``wait_p90`` per class and overall (the engine's waiting-time histogram, binned and
    interpolated as the forward scan does) against the empirical 0.9 quantile of the same jobs
    through the heapq simulator: within 5% (a bin is 1/16 octave, 4.4% wide)."""
    wl = _workloads()["five-class-exp"][0]
    res, cls, wait, _ = _five_class_run(policy)
    out = res.as_dict(wl)
    np.testing.assert_array_equal(res.hist.sum(axis=1), np.bincount(cls, minlength=wl.n_classes))
    checked = 0
    for c in range(wl.n_classes):
        w = wait[cls == c]
        p90 = float(np.quantile(w, 0.9))
        if len(w) < 400 or p90 == 0.0:
            assert len(w) < 400 or out["classes"][c]["wait_p90"] == 0.0
            continue
        np.testing.assert_allclose(out["classes"][c]["wait_p90"], p90, rtol=0.05)
        checked += 1
    assert checked >= 2
    np.testing.assert_allclose(out["wait_p90"], float(np.quantile(wait, 0.9)), rtol=0.05)


def test_window_one_is_fcfs_and_a_wide_window_first_fit():
    wl, lam = _workloads()["five-class-exp"]
    key = jax.random.key(3)
    fcfs = _engine_sums(wl, lam, "fcfs", key, 8, 100, 1000)
    np.testing.assert_allclose(_engine_sums(wl, lam, "window:1", key, 8, 100, 1000), fcfs)
    ff = _engine_sums(wl, lam, "first-fit", key, 8, 100, 1000)
    np.testing.assert_allclose(_engine_sums(wl, lam, "window:64", key, 8, 100, 1000), ff)
    assert not np.allclose(fcfs[0], ff[0])


# fcfs in the default suite; the two policies with more state (a prefix, sorted slots and
# front registers) compile for 8-11 s each, so they run with the slow tests
_SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "policy",
    [
        "fcfs",
        pytest.param("server-filling", marks=_SLOW),
        pytest.param("easy-backfilling", marks=_SLOW),
    ],
)
def test_the_last_replications_to_finish_alone_give_the_same_sums(policy, monkeypatch):
    """The last replications to finish go on in a batch of their own (``_loop._TAIL``): the
    sums of each replication are those of a batch where every one runs to the end."""
    wl, lam = _workloads()["five-class-exp"]
    key = jax.random.key(5)
    full = _engine_sums(wl, lam, policy, key, 8, 100, 600)  # 8 < _TAIL_MIN: one batch
    monkeypatch.setattr(_loop, "_TAIL_MIN", 6)
    monkeypatch.setattr(_loop, "_TAIL", 3)  # (a shape of its own: compiled with these)
    tail = _engine_sums(wl, lam, policy, key, 6, 100, 600)  # the last 2 alone
    for x, y in zip(full, tail, strict=True):
        np.testing.assert_array_equal(x[:, :6], y)


@pytest.mark.slow
def test_fcfs_event_engine_equals_the_mjsre_forward_scan():
    """fcfs on the event engine and eq. (2) on the same jobs: the same mean wait per class.
    (Slow: a forward-scan compile of its own; in the default suite
    ``test_tails_forward.py::test_convolved_responses_agree_with_the_event_engines_binned_ones``
    asks the same equality, to 1e-9, on three laws and needs 1, 2, 4, and fcfs on this
    workload equals the heapq simulator job by job above.)"""
    wl = scenarios.get("five-class-exp")
    key = jax.random.key(5)
    ev = simulate_policy(wl, 1.4, "fcfs", key=key, n_jobs=2000, warmup=400, n_replications=8)
    fw = simulate(wl, 1.4, key=key, n_jobs=2000, warmup=400, n_replications=8, dtype=jnp.float64)
    np.testing.assert_allclose(np.asarray(ev.wait_mean_class.mean), fw.wait_mean, rtol=1e-9)
    mean = np.asarray(wl.mean_service())
    np.testing.assert_allclose(
        np.asarray(ev.response_mean_class.mean), fw.wait_mean + mean, rtol=0.05
    )


@pytest.mark.slow
def test_fcfs_event_engine_covers_the_exact_solver():
    """(Slow: the default suite checks fcfs on the engine equal to the MJSRE scan job by job,
    and the scan against the exact solver in ``test_mjqm_vs_exact.py``.)"""
    wl = scenarios.get("five-class-exp")
    lam = 0.5 * 1.8008553591
    ex = exact(wl, lam)
    res = simulate_policy(wl, lam, "fcfs", key=jax.random.key(2), n_jobs=10_000, n_replications=64)
    assert res.status == "ok"
    truth = float(ex.wait_mean) + float(np.dot(wl.probs, wl.mean_service()))
    assert res.response_mean.low <= truth <= res.response_mean.high


# a small exponential system (s = 3, needs 1 and 2, fcfs lambda_c = 1.585) at a load where the
# CTMC truncated at 16 jobs loses less than 1e-6 of its mass
CTMC_CASE = dict(s=3, cores=(1, 2), probs=(0.6, 0.4), mus=(1.0, 0.8))
CTMC_LAM, CTMC_MAX = 0.5, 16


def _ctmc_workload():
    c = CTMC_CASE
    return Workload(
        servers=c["s"],
        cores=c["cores"],
        probs=c["probs"],
        services=tuple(Exponential(1.0 / m) for m in c["mus"]),
        name="small",  # the name of the CLI tests' file: the same static fields, the same kernels
    )


@functools.cache
def _ctmc_ref(policy: str) -> dict:
    """The truncated CTMC at ``CTMC_LAM`` (3-7 s of numpy each: the default suite reads its
    answers from ``SMALL_CTMC``, which the slow test below recomputes)."""
    return mjqm_ctmc.ctmc_policy(policy, lam=CTMC_LAM, max_jobs=CTMC_MAX, **CTMC_CASE)


@pytest.mark.slow
@pytest.mark.parametrize("policy", list(SMALL_CTMC))
def test_tabulated_ctmc_values_are_the_chains(policy):
    ref = _ctmc_ref(policy)
    for key, value in SMALL_CTMC[policy].items():
        assert ref[key] == pytest.approx(value, rel=1e-11), key


# first-fit in the default suite (the estimators of the mean response, jobs and idle servers
# are the engine's, whatever the policy); the other policies with the slow tests: each equals
# the heapq simulator job by job above (fcfs also the MJSRE scan on the same jobs,
# test_tails_forward.py, and the scan the exact QBD, test_vs_exact.py)
_CTMC_FAST = ("first-fit",)


@pytest.mark.parametrize(
    "policy",
    [
        p if p in _CTMC_FAST else pytest.param(p, marks=pytest.mark.slow)
        for p in ALL
        if p != "easy-backfilling"
    ],
)
def test_policy_against_the_truncated_ctmc(policy):
    """Mean response time against the CTMC over the ordered queue contents, within 4
    standard errors (fast version; the slow one asks 1e-3 relative). 64 x 1,500 jobs: the
    standard error is about 0.6% of the mean response (4 of them 2.3%, a 5% bias is 9) and
    0.7% of the mean jobs (the 5% below is 7); the kernel is the one the command-line tests
    on this workload compile (64 replications, the first buffer)."""
    ref = SMALL_CTMC[policy]  # the chain's answers (tests/references/mjqm_ctmc_values.py)
    assert ref["p_full"] < 1e-6
    res = simulate_policy(
        _ctmc_workload(), CTMC_LAM, policy, key=jax.random.key(7), n_jobs=1_500, n_replications=64
    )
    assert res.status == "ok"
    se = float(res.response_mean.half_width) / 2.0
    assert abs(float(res.response_mean.mean) - ref["response_mean"]) < 4 * se
    np.testing.assert_allclose(float(res.jobs_mean.mean), ref["jobs_mean"], rtol=0.05)
    np.testing.assert_allclose(float(res.idle_servers.mean), ref["idle_servers_mean"], rtol=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("policy", [p for p in ALL if p != "easy-backfilling"])
def test_policy_against_the_truncated_ctmc_to_1e3(policy):
    ref = _ctmc_ref(policy)
    res = simulate_policy(
        _ctmc_workload(),
        CTMC_LAM,
        policy,
        key=jax.random.key(8),
        n_jobs=400_000,
        n_replications=64,
        execution=Execution(buffer=64),
    )
    assert res.status == "ok"
    np.testing.assert_allclose(float(res.response_mean.mean), ref["response_mean"], rtol=1e-3)


def test_saturated_throughput_is_lambda_c_for_fcfs():
    from jaxqueue.mjqm.engines.events import saturated_throughput

    wl = _ctmc_workload()
    exact_limit = mjqm_ctmc.fcfs_saturated_throughput(**CTMC_CASE)
    # 5000 jobs a replication: half-widths about 1%; window:4's whole interval lies 6% above
    m, (lo, hi) = saturated_throughput(wl, "fcfs", key=jax.random.key(4), n_jobs=5000)
    assert lo <= exact_limit <= hi
    m4, (lo4, _) = saturated_throughput(wl, "window:4", key=jax.random.key(4), n_jobs=5000)
    assert lo4 > exact_limit


@pytest.mark.slow
def test_saturated_throughput_is_lambda_c_for_window_one():
    """(Slow: the default suite runs the saturated window layout with ``window:4`` and checks
    ``window:1`` equal to fcfs job by job: ``test_window_one_is_fcfs_and_a_wide_window_...``.)"""
    from jaxqueue.mjqm.engines.events import saturated_throughput

    exact_limit = mjqm_ctmc.fcfs_saturated_throughput(**CTMC_CASE)
    m, (lo, hi) = saturated_throughput(
        _ctmc_workload(), "window:1", key=jax.random.key(4), n_jobs=5000
    )
    assert lo <= exact_limit <= hi


def test_server_filling_limit_is_lambda_ideal_when_needs_divide_s():
    wl = Workload(
        servers=4, cores=(1, 2, 4), probs=(0.5, 0.3, 0.2), services=(Exponential(1.0),) * 3
    )
    lim = stability_limit(wl, "server-filling")
    assert lim.method == "ideal" and lim.lambda_c == pytest.approx(float(wl.lambda_ideal()))
    wl3 = _ctmc_workload()  # need 2 does not divide s = 3
    assert stability_limit(wl3, "server-filling").lambda_c is None
    # needs 2 and 3 divide s = 6 but are no chain: the saturated system stays below ideal
    wl6 = Workload(servers=6, cores=(2, 3), probs=(0.5, 0.5), services=(Exponential(1.0),) * 2)
    assert stability_limit(wl6, "server-filling").lambda_c is None


def test_overload_is_refused_or_flagged():
    wl = _ctmc_workload()
    lim = mjqm_ctmc.fcfs_saturated_throughput(**CTMC_CASE)
    limit = stability_limit(wl, "fcfs")
    with pytest.raises(ValueError, match="stability limit"):
        simulate_policy(wl, 1.05 * lim, "fcfs", key=jax.random.key(0), n_jobs=2000, limit=limit)
    with pytest.raises(ValueError, match="lambda_ideal"):  # no policy is stable beyond it
        simulate_policy(wl, 1.3 * float(wl.lambda_ideal()), "msf", key=jax.random.key(0))
    # 64 replications and the first buffer (64 entries, no growth): the CTMC test's kernel
    res = simulate_policy(
        wl,
        1.3 * float(wl.lambda_ideal()),
        "first-fit",
        key=jax.random.key(0),
        override=True,
        n_jobs=4000,
        n_replications=64,
        max_buffer=64,
    )
    assert res.status in ("overflow", "nonstationary")


# (policy: one deque per need, front registers, body behind them, sorted slots, prefix rows)
LAYOUTS = {
    "fcfs": (False, 1, False, False, 0),
    "first-fit": (True, 1, False, False, 0),
    "window:4": (False, 4, False, False, 0),
    "preemptive-first-fit": (True, 1, False, False, 0),
    "msf": (True, 1, False, False, 0),
    "least-servers-first": (True, 1, False, False, 0),
    "server-filling": (False, 1, False, False, 8),
    "easy-backfilling": (False, 16, True, True, 0),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_the_engine_derives_each_layout_from_the_policy_facts(name):
    """The event engine's layout of each policy (internal: ``_layout.layout_of``), from its
    facts alone: the layouts the engine has always given these policies (s = 8)."""
    lay = _layout.layout_of(parse_policy(name), 8, (8, 4, 2, 1))
    assert (lay.per_need, lay.registers, lay.inside, lay.sorted_slots, lay.rows) == LAYOUTS[name]
    assert lay.preemptive == parse_policy(name).preemptive
    assert (lay.pick is None) == (lay.rows > 0)


def test_facts_without_an_engine_layout_are_refused():
    from jaxqueue.mjqm.policies import FCFS, Order

    class ByNeedNonPreemptive(FCFS):  # a non-preemptive policy in need order
        name = "by-need"
        order = Order.MOST_SERVERS

    with pytest.raises(NotImplementedError, match="by-need"):
        _layout.layout_of(ByNeedNonPreemptive(), 8, (8, 4, 2, 1))


@pytest.mark.parametrize("bad", ["fifo", "window", "window:0", "window:x", "msf:2", ""])
def test_bad_policy_names(bad):
    with pytest.raises(ValueError, match="policy"):
        parse_policy(bad)


def test_policy_names_listed():
    for name in POLICIES:
        example = {
            "msfq:L": "msfq:2",
            "balanced-splitting:R0/.../Rm-1+H": "balanced-splitting:2/2+2",
        }
        parse_policy(example.get(name, name.replace(":W", ":2").replace("=F", "=2")))


# ----------------------------------------------------------------------------- command line
def _cli(argv, capsys):
    from jaxqueue.cli import main

    status = main(argv)
    out = capsys.readouterr()
    return status, out.out, out.err


def test_cli_simulate_policy_json(small_toml, capsys):
    path = small_toml
    import json

    argv = [
        "mjqm",
        "simulate",
        "--scenario",
        str(path),
        "--lam",
        "0.5",
        "--jobs",
        "500",
        "--replications",
        "64",
        "--json",
    ]
    status, out, _ = _cli(argv + ["--policy", "first-fit"], capsys)
    assert status == 0
    res = json.loads(out)
    ref = SMALL_CTMC["first-fit"]  # --lam 0.5 = CTMC_LAM
    assert res["policy"] == "first-fit" and res["status"] == "ok"
    lo, hi = res["response_mean_ci"]
    assert lo < res["response_mean"] < hi
    assert abs(res["response_mean"] - ref["response_mean"]) < 2 * (hi - lo)
    for c in res["classes"]:
        assert {
            "cores",
            "prob",
            "wait_mean",
            "wait_mean_ci",
            "response_mean",
            "response_mean_ci",
        } <= set(c)
    assert {"idle_servers", "hol_idle_servers", "stability", "lam"} <= set(res)
    # fcfs stays the MJSRE path, with the response keys added
    status, out, _ = _cli(argv + ["--start", "empty"], capsys)
    res = json.loads(out)
    assert status == 0 and res["policy"] == "fcfs"
    assert res["response_mean_ci"][0] < res["response_mean"] < res["response_mean_ci"][1]
    assert all("response_mean" in c for c in res["classes"])


@pytest.mark.parametrize(
    "extra, message, code",
    [
        (["--policy", "lifo"], "unknown policy 'lifo'", 2),
        (["--policy", "window:0"], "window needs an integer W >= 1", 2),
        (["--policy", "msf", "--lam", "-1"], "argument --lam: expected a finite number > 0", 2),
        (["--policy", "window:1", "--lam", "5"], "beyond the stability limit", 1),
    ],
)
def test_cli_policy_bad_input_one_line(extra, message, code, small_toml, capsys):
    path = small_toml
    argv = [
        "mjqm",
        "simulate",
        "--scenario",
        str(path),
        "--lam",
        "0.5",
        "--jobs",
        "2000",
        "--replications",
        "4",
    ]
    status, out, err = _cli(argv + extra, capsys)
    assert status == code and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_short_run_near_the_limit_is_not_ok():
    """Issue 16 rule on the event engine: a run too short for its own checks is never ok."""
    wl = scenarios.get("five-class-exp")
    res = simulate_policy(
        wl,
        0.97 * 1.8008553591,
        "fcfs",
        key=jax.random.key(0),
        n_jobs=200,
        warmup=0,
        n_replications=8,
    )
    assert res.status == "nonstationary" and res.n_eff < 5


# the full-buffer tests' workload: a buffer of 4 fills at once
_FULL = dict(servers=4, cores=(1, 4), probs=(0.8, 0.2), services=(Exponential(1.0),) * 2)


def _grown_equals_large(wl, lam, policy, key, n_jobs, small_buffer, large_buffer):
    """A run from ``small_buffer`` slots that grows (it must) gives the per-class responses
    and waits and the mean jobs of a run with ``large_buffer`` slots from the start."""
    kw = dict(key=key, n_jobs=n_jobs, n_replications=4)
    small = simulate_policy(wl, lam, policy, **kw, execution=Execution(buffer=small_buffer))
    large = simulate_policy(wl, lam, policy, **kw, execution=Execution(buffer=large_buffer))
    assert small.buffer > small_buffer and large.buffer == large_buffer
    for a, b in [
        (small.response_mean_class, large.response_mean_class),
        (small.wait_mean_class, large.wait_mean_class),
        (small.jobs_mean, large.jobs_mean),
    ]:
        np.testing.assert_allclose(np.asarray(a.mean), np.asarray(b.mean), rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["fcfs", "server-filling", "easy-backfilling"])
def test_a_small_buffer_goes_on_with_more_slots_to_the_same_result(policy):
    """Replications whose buffer fills go on from where they stopped with twice the slots: the
    same sums as a run with a large buffer from the start. (Slow: in the default suite
    ``test_a_full_buffer_leaves_no_ghost_in_service`` grows the buffers of fcfs and
    easy-backfilling from 4 slots and asks the heapq simulator's sums, replication by
    replication.)"""
    wl, lam = _workloads()["rare-8"]
    _grown_equals_large(wl, lam, policy, jax.random.key(21), 1500, 16, 512)


@pytest.mark.parametrize(
    "policy",
    [
        "fcfs",
        pytest.param("first-fit", marks=pytest.mark.slow),
        "easy-backfilling",
        pytest.param("server-filling", marks=pytest.mark.slow),
    ],
)
def test_a_full_buffer_leaves_no_ghost_in_service(policy):
    """A completion while every slot is taken must not leave the last slot's job in service
    (review finding): a buffer of 4 going on with more slots (every replication fills its 4;
    fcfs and easy-backfilling fill 8 too) gives, replication by replication, the responses
    and waits of the heapq simulator on the same jobs. In the default suite the one FIFO
    (fcfs) and the FIFO with registers and sorted slots (easy-backfilling); first-fit's deque
    per need (the same slots and ``_grow``, one more deque axis) and the prefix-rows layout
    of server-filling with the slow tests."""
    from jaxqueue.mjqm.engines.events._simulate import _runs

    wl, lam, key, reps, warmup, n_jobs = Workload(**_FULL), 1.0, jax.random.key(9), 4, 400, 2000
    pol = parse_policy(policy).bind(wl)
    sizes, dt = (reps, warmup, n_jobs), jnp.dtype(jnp.float64)
    acc, overflow, _, buffers = _runs(pol, wl, lam, key, sizes, 4, 4096, dt)
    assert (buffers > 4).all() and not overflow.any()  # every replication filled its 4 slots
    for r in range(reps):
        ref = _reference_sums(wl, lam, policy, key, r, warmup, n_jobs)
        np.testing.assert_array_equal(acc.cnt[:, r], ref[2])
        np.testing.assert_allclose(acc.resp[:, r], ref[0], rtol=1e-9)
        np.testing.assert_allclose(acc.wait[:, r], ref[1], rtol=1e-9, atol=1e-9)


def test_server_filling_float32_keeps_its_remaining_work_when_the_epoch_moves():
    """The window layout's rows out of service hold remaining work, not an end time: moving
    the epoch (float32, every ``_REBASE`` chunks) must shift only the jobs in service. Over
    3000 jobs the float32 run moves the epoch about 11 times and stays within 1e-5 of
    float64 (shifting every row gave negative response times)."""
    wl = scenarios.get("five-class-exp")
    kw = dict(key=jax.random.key(3), n_jobs=3000, n_replications=8)
    runs = [
        simulate_policy(wl, 1.2, "server-filling", dtype=dt, **kw)
        for dt in (jnp.float64, jnp.float32)
    ]
    for get in (lambda r: r.response_mean, lambda r: r.wait_mean, lambda r: r.jobs_mean):
        a, b = (float(get(r).mean) for r in runs)
        assert abs(b - a) <= 1e-5 * a


def test_easy_backfilling_buffer_capped_where_its_pick_packs_positions(monkeypatch):
    """EASY's pick packs a FIFO position into the upper 16 bits of an int32: its buffer never
    passes its ``max_buffer`` (2^14), whatever ``buffer`` and ``max_buffer`` ask (beyond it:
    overflow). The cap is checked at 4 entries (a 2^14-entry FIFO scan takes half a minute;
    4 replications of 4 entries: the first kernel of the full-buffer test)."""
    lay = _layout.layout_of(parse_policy("easy-backfilling"), 4, (4, 1))
    assert lay.max_buffer == 1 << 14 and (lay.max_buffer << 16) < 2**31
    monkeypatch.setattr(_layout, "_PACKED_BUFFER", 4)
    res = simulate_policy(
        Workload(**_FULL),
        1.0,
        "easy-backfilling",
        key=jax.random.key(3),
        n_jobs=40,
        n_replications=4,
        execution=Execution(buffer=256),
        max_buffer=1 << 16,
    )
    assert res.buffer == 4


def test_a_class_seen_in_one_replication_is_not_ok():
    """A class of probability 1e-5: over 64 x 900 measured jobs it is seen in one replication
    (0.58 jobs expected), so no interval: ``unconverged`` for that reason (64 replications:
    not the few-replications rule)."""
    wl = _ctmc_workload()
    wl = Workload(wl.s, CTMC_CASE["cores"], (1 - 1e-5, 1e-5), wl.services, name=wl.name)
    run = dict(n_jobs=1000, warmup=100, n_replications=64)
    res = simulate_policy(wl, CTMC_LAM, "first-fit", key=jax.random.key(0), **run)
    assert (res.response_hists[:, 1].sum(axis=1) > 0).sum() == 1
    assert res.status == "unconverged" and "fewer than 2 replications" in res.status_reason()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["simulate", "--policy", "msf", "--dtype", "float64"], "apply to --policy fcfs"),
        (["compare", "--policies", ","], "--policies names no policy"),
        (["compare", "--loads", "0.5,x"], "--loads must be"),
        (["compare", "--replications", "1"], "--replications: expected an integer >= 2"),
    ],
)
def test_cli_policy_options_refused_one_line(argv, message, small_toml, capsys):
    path = small_toml
    args = ["mjqm", argv[0], "--scenario", str(path), *argv[1:]]
    if argv[0] == "simulate":
        args += ["--lam", "0.5"]
    status, out, err = _cli(args, capsys)
    assert status == 2 and out == "" and message in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_server_filling_is_stationary_near_lambda_ideal():
    """Throughput optimal: server-filling at 0.9 lambda_ideal (needs 1, 2, 4; s = 4) is
    stationary."""
    wl = Workload(
        servers=4, cores=(1, 2, 4), probs=(0.5, 0.3, 0.2), services=(Exponential(1.0),) * 3
    )
    lim = float(wl.lambda_ideal())
    res = simulate_policy(
        wl, 0.9 * lim, "server-filling", key=jax.random.key(1), n_jobs=10_000, n_replications=64
    )
    assert res.status == "ok"


def test_too_few_replications_are_unconverged_as_in_the_forward_scan():
    """The forward scan's rule (``MIN_REPLICATIONS``): 8 replications of a heavy-tailed
    ratio give an interval too short to trust, so the status says so, with its reason. (8
    and 64 replications: the first-fit kernels of test_progress.py and of the CTMC test.)"""
    from jaxqueue.mjqm._estimators import MIN_REPLICATIONS

    wl = _ctmc_workload()
    run = dict(key=jax.random.key(7), n_jobs=1000)
    few = simulate_policy(wl, CTMC_LAM, "first-fit", n_replications=8, **run)
    enough = simulate_policy(wl, CTMC_LAM, "first-fit", n_replications=MIN_REPLICATIONS, **run)
    assert few.status == "unconverged" and enough.status == "ok"
    assert f"fewer than the {MIN_REPLICATIONS}" in few.status_reason()


def test_loads_side_by_side_equal_runs_alone():
    """``simulate_loads`` (the loads of one policy as columns of one kernel call, as ``mjqm
    compare`` runs them) gives, per load, the result of ``simulate`` at that load alone: the
    same replications (every count, histogram, buffer growth and status equal; a first buffer
    of 4 entries that the higher load fills, at most 8), the float sums to rounding (a rate
    per column compiles to other float code than one rate: 1e-12 relative). fcfs on the
    full-buffer test's workload: the runs alone are that test's kernels."""
    from jaxqueue.mjqm.engines.events import simulate_loads

    wl = Workload(**_FULL)
    lams = (0.3, 1.0)
    kw = dict(key=jax.random.key(3), n_jobs=400, n_replications=4, max_buffer=8)
    kw["execution"] = Execution(buffer=4)
    together = simulate_loads(wl, lams, "fcfs", **kw)
    alone = [simulate_policy(wl, lam, "fcfs", **kw) for lam in lams]
    assert [r.buffer for r in alone] == [4, 8] and alone[1].status == "overflow"
    for a, b in zip(together, alone, strict=True):
        assert jax.tree.structure(a) == jax.tree.structure(b)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            if isinstance(x, str | tuple | type(None)):
                assert x == y
            elif np.asarray(x).dtype.kind in "iub":
                assert np.array_equal(np.asarray(x), np.asarray(y))
            else:
                np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-12, atol=0)
