"""Results as tables and figures (issue 20): ``to_frame()`` on every result with per-class or
per-point rows, its columns and values checked against the result's fields; the CLI's
``--csv`` writes the same table; ``jaxqueue.plot`` returns figures without touching pyplot."""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pd = pytest.importorskip("pandas")

from jaxqueue import mjqm, networks, pools, scenarios, sched  # noqa: E402
from jaxqueue.cli import main  # noqa: E402
from jaxqueue.dist import Exponential, get_law  # noqa: E402

# the workload of the policy tests' command lines (tests/mjqm/policies/conftest.py's file,
# named as the file is): the kernels below are those tests' (the same static fields and sizes)
SMALL = mjqm.Workload(
    servers=3,
    cores=(1, 2),
    probs=(0.6, 0.4),
    services=(Exponential(1.0), Exponential(1.25)),
    name="small",
)
# 64 replications: the runs of test_cli_simulate_policy_json and the CTMC tests
RUN = dict(n_jobs=500, n_replications=64)


def _equal(frame, column, values):
    np.testing.assert_allclose(frame[column].to_numpy(dtype=float), np.ravel(values), rtol=1e-12)


def test_pools_solve_one_point_batched_and_typed():
    pool = pools.preset_pool("m-model-sym")
    res = pools.solve(pool, jnp.asarray([0.9, 0.6]))
    df = res.to_frame()
    assert list(df.columns) == ["class", "L", "T", "gamma", "psi_class"]
    assert df["class"].tolist() == [0, 1]
    for k in ("L", "T", "gamma", "psi_class"):
        _equal(df, k, getattr(res, k))
    lams = jnp.asarray([[0.3, 0.3], [0.9, 0.6], [1.0, 1.1]])
    batch = jax.vmap(lambda lam: pools.solve(pool, lam))(lams)
    df = batch.to_frame()
    assert list(df.columns[:2]) == ["point", "class"] and len(df) == 6
    _equal(df, "T", batch.T)
    assert df["point"].tolist() == [0, 0, 1, 1, 2, 2]
    typed = pools.TypedPool([8, 4], [[0], [0, 1]], jnp.asarray([1.0, 2.0]))
    res = pools.solve(typed, jnp.asarray([3.0, 6.0]))
    _equal(res.to_frame(), "L", res.L)


def test_mjqm_exact_with_and_without_workload_and_over_loads():
    res = mjqm.exact(SMALL, 1.2)
    df = res.to_frame()
    assert list(df.columns) == [
        "class", "lam", "lambda_c", "wait_mean", "jobs_waiting", "jobs_in_service"
    ]  # fmt: skip
    _equal(df, "wait_mean", res.wait_mean_class)
    _equal(df, "jobs_waiting", res.jobs_waiting_class)
    assert (df["lam"] == 1.2).all() and (df["lambda_c"] == float(res.lambda_c)).all()
    df = res.to_frame(SMALL)
    assert df["cores"].tolist() == [1, 2]
    _equal(df, "response_mean", np.asarray(res.wait_mean_class) + (1.0, 1.25))
    loads = jnp.asarray([0.4, 0.8, 1.2])
    batch = jax.vmap(lambda lam: mjqm.exact(SMALL, lam))(loads)
    df = batch.to_frame(SMALL)
    assert len(df) == 6 and df["lam"].tolist() == [0.4, 0.4, 0.8, 0.8, 1.2, 1.2]
    _equal(df, "wait_mean", batch.wait_mean_class)


def test_mjqm_simulate_policy_and_backward_metrics():
    key = jax.random.key(0)
    res = mjqm.simulate(SMALL, 0.5, key=key, **RUN)
    df = res.to_frame()
    assert {"class", "lam", "cores", "prob", "wait_mean", "wait_mean_low", "wait_mean_high"} <= set(
        df.columns
    )
    _equal(df, "wait_mean", res.wait_mean)
    _equal(df, "wait_mean_low", res.wait_mean_ci[:, 0])
    _equal(df, "wait_mean_high", res.wait_mean_ci[:, 1])
    _equal(df, "wait_p90", [res.wait_quantile(0.9, c) for c in range(2)])
    pol = mjqm.simulate_policy(SMALL, 0.5, "first-fit", key=key, **RUN)
    df = mjqm.metrics_frame(pol, SMALL)
    _equal(df, "response_mean", pol.response_mean_class.mean)
    _equal(df, "response_mean_high", pol.response_mean_class.high)
    # five-class-exp: the run of tests/mjqm/test_backward.py::test_cli_sample_biased_status_warns
    five = scenarios.get("five-class-exp")
    S = mjqm.sample_backward(five, 1.5, 64, key=key, ell0=256, bias_control=None, dtype=jnp.float32)
    metrics = mjqm.palm_metrics(five, S)
    df = mjqm.metrics_frame(metrics)
    assert isinstance(metrics, dict) and len(df) == 5  # the dict stays as it is
    _equal(df, "wait_mean", [c["wait_mean"] for c in metrics["classes"]])
    _equal(df, "wait_mean_low", [c["wait_mean_ci"][0] for c in metrics["classes"]])
    with pytest.raises(ValueError, match="needs its workload"):
        mjqm.metrics_frame(pol)


def test_sched_and_networks():
    pool = pools.preset_pool("m-model-sym")
    ca = sched.ClassAssignment(pool.server_sets, np.asarray(pool.mu, dtype=float))
    res = sched.simulate(
        ca, np.array([0.6, 0.6]), get_law("exp", mean=1.0), key=jax.random.key(1),
        replications=4, jumps=2000, warmup=2000,
    )  # fmt: skip
    df = res.to_frame()
    assert list(df.columns) == [
        "class", "delay", "delay_low", "delay_high", "service_rate", "service_rate_low",
        "service_rate_high", "L",
    ]  # fmt: skip
    for k in df.columns[1:]:
        _equal(df, k, getattr(res, k))
    net = networks.network_from_spec(
        {
            "queues": [[[0, 1], [1]], [[2, 3]]],
            "mu": [1.0, 1.2, 0.8, 1.5],
            "routing": [[0.1, 0.0, 0.5], [0.0, 0.2, 0.3], [0.2, 0.1, 0.0]],
            "nu": [0.25, 0.2, 0.1],
        }
    )
    res = networks.solve(net)
    df = res.to_frame()
    assert list(df.columns) == ["class", "visits", "lam", "throughput", "L", "T"]
    for k in df.columns[1:]:
        _equal(df, k, getattr(res, k))


def test_missing_pandas_is_one_clear_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas raises ImportError
    res = pools.solve(pools.preset_pool("m-model-sym"), jnp.asarray([0.5, 0.5]))
    with pytest.raises(ImportError, match=r"pip install 'jaxqueue\[tables\]'"):
        res.to_frame()


def _classes(df):
    """The class rows of a CLI CSV (0-based) and its last row, ``class = all``."""
    assert str(df["class"].iloc[-1]) == "all", df
    rows = df.iloc[:-1].astype({"class": int}).reset_index(drop=True)
    assert list(rows["class"]) == list(range(len(rows)))
    return rows, df.iloc[-1]


def test_cli_csv_is_the_result_table(tmp_path, capsys):
    path = tmp_path / "exact.csv"
    # five classes on 4 servers: a small QBD (five-class-exp's 842 phases compile for 10 s)
    spec = tmp_path / "five.json"
    classes = [
        {"cores": c, "prob": 0.2, "law": "exponential", "mean": 1.0} for c in (1, 1, 2, 2, 4)
    ]
    spec.write_text(json.dumps({"name": "five-small", "servers": 4, "classes": classes}))
    assert main(["mjqm", "exact", "--scenario", str(spec), "--lam", "0.5", "--csv",
                 str(path), "--json"]) == 0  # fmt: skip
    wl = scenarios.get(str(spec))
    res = mjqm.exact(wl, 0.5)
    ref = res.to_frame(wl)
    got, every = _classes(pd.read_csv(path))  # the classes, then the row "all"
    pd.testing.assert_frame_equal(got, ref, check_dtype=False, rtol=1e-12)
    assert every["wait_mean"] == pytest.approx(float(res.wait_mean), rel=1e-12)
    path = tmp_path / "bf.csv"
    assert main(["bf", "solve", "--pool", "m-model-sym", "--rho", "0.6", "--csv", str(path)]) == 0
    res = pools.solve(pools.preset_pool("m-model-sym"), jnp.asarray([0.9, 0.9]))
    ref = res.to_frame()
    got, every = _classes(pd.read_csv(path))
    pd.testing.assert_frame_equal(got[list(ref.columns)], ref, check_dtype=False, rtol=1e-12)
    assert every["T"] == pytest.approx(float(res.metrics()["T_mean"]), rel=1e-12)
    capsys.readouterr()
    assert main(["bf", "solve", "--pool", "m-model-sym", "--rho", "0.6", "--csv",
                 str(tmp_path / "no" / "x.csv")]) == 1  # fmt: skip
    assert "--csv" in capsys.readouterr().err


def test_plot_returns_figures_without_pyplot(tmp_path):
    from matplotlib.figure import Figure

    from jaxqueue import plot

    batch = jax.vmap(lambda lam: mjqm.exact(SMALL, lam))(jnp.asarray([0.4, 0.8, 1.2]))
    df = batch.to_frame(SMALL)
    before = sys.modules.get("matplotlib.pyplot")
    fig = plot.load_curve(df, "wait_mean")
    assert isinstance(fig, Figure) and len(fig.axes[0].lines) >= 2
    fig.savefig(tmp_path / "w.png")
    res = mjqm.simulate(SMALL, 0.5, key=jax.random.key(0), **RUN)
    assert isinstance(plot.per_class(res.to_frame(), "wait_mean"), Figure)
    assert (tmp_path / "w.png").stat().st_size > 1000
    assert sys.modules.get("matplotlib.pyplot") is before  # no pyplot, no backend switch
