"""Study of ``mjsre`` Section 8 and the backward/forward comparison of Section 7.4.

``jaxqueue reproduce mjsre [--fast]`` writes, under ``out_dir``:

* ``fig2a_waste_two_class.png/.csv``: servers wasted at saturation (``s - lambda_c E[alpha
  sigma]``, all idle servers are HOL-blocked when the queue never empties) for s = 200,
  one-core and 100-core jobs equally likely, against the big jobs' mean service time;
* ``fig2b_hol_waste.png`` (HOL-idle servers vs lambda, five-class scenario, four laws),
  ``fig2c_wait_pdf_bpareto.png`` (per-class waiting-time density, bounded Pareto),
  ``fig3_exp.png``, ``fig4_hyperexp.png`` (per-class mean with CI, variance, 90th percentile
  vs lambda), ``fig5_class1.png``, ``fig6_class15.png`` (one class, four laws), with the data
  in ``five_class_sweep.csv`` and ``stability_five_class.csv``;
* ``fig7b_borg.png/.csv``: ``borg-cell-b`` mean wait vs lambda, backward sampler and forward
  simulation, with ``lambda_c``;
* ``table1_two_class_256.csv/.png``: at ``lambda = k 0.1 lambda_max``, k = 1..9 (2, 5, 8 in
  fast mode), the exact mean wait (:func:`jaxqueue.mjqm.exact`) beside the backward
  (Algorithm 1) and forward MJSRE estimates with their 99% intervals, run times and coverage;
  ``lambda_max`` is :func:`jaxqueue.mjqm.exact_lambda_c`, checked against eq. (8).

Fast mode (CPU, a few minutes) uses few loads and samples; full mode is sized for a GPU.
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from ..mjqm import (
    exact,
    exact_lambda_c,
    exact_size,
    lambda_c_closed_form,
    palm_metrics,
    pile_growth,
    sample_backward,
    simulate,
    wait_density,
)
from ..scenarios import get
from ._io import pyplot, save_figure, write_csv

LAWS = ["exp", "erlang3", "hyperexp", "bpareto"]


def _errorbar(ax, x, est, **kw) -> None:
    """Points ``est[:, 0]`` with error bars to ``[est[:, 1], est[:, 2]]`` (an interval)."""
    ax.errorbar(x, est[:, 0], yerr=[est[:, 0] - est[:, 1], est[:, 2] - est[:, 0]], **kw)


def _backward_forward(wl, lam, keys, *, n_samples, ell0, n_jobs, n_replications, **check):
    """The mean wait at ``lam`` by backward sampling (Algorithm 1, float32, 99% intervals from
    :func:`palm_metrics`) and by a forward run from empty, with the seconds each took:
    ``(palm metrics, forward result, backward seconds, forward seconds)``; ``check``: the
    load-check options of both."""
    t0 = time.perf_counter()
    S = sample_backward(wl, lam, n_samples, key=keys[0], dtype=jnp.float32, ell0=ell0, **check)
    m = palm_metrics(wl, S, level=0.99)
    tb = time.perf_counter() - t0
    t0 = time.perf_counter()
    fw = simulate(
        wl,
        lam,
        key=keys[1],
        n_jobs=n_jobs,
        n_replications=n_replications,
        level=0.99,
        **check,
    )
    return m, fw, tb, time.perf_counter() - t0


def _fig2a(out, fast, key, plt, files):
    big_means = np.geomspace(0.1, 10.0, 5 if fast else 17)
    rows = []
    for i, m in enumerate(tqdm(big_means, desc="fig 2(a)", leave=False)):
        wl = get("two-class-200", big_mean=float(m))
        r = pile_growth(
            wl,
            key=jax.random.fold_in(key, i),
            rel_tol=0.03 if fast else 0.005,
            dtype=jnp.float32,
            max_jobs=1 << (18 if fast else 24),
        )
        work = float(wl.mean_work()[0])
        waste = 200 - r.lambda_c * work
        lo, hi = 200 - r.lambda_c_ci[1] * work, 200 - r.lambda_c_ci[0] * work
        rows.append([m, r.lambda_c, r.lambda_c_ci[0], r.lambda_c_ci[1], waste, lo, hi])
    a = np.array(rows)
    write_csv(
        out / "fig2a_waste_two_class.csv",
        ["big_mean", "lambda_c", "lambda_c_lo", "lambda_c_hi", "waste", "waste_lo", "waste_hi"],
        rows,
    )
    fig, ax = plt.subplots(figsize=(5, 3.5))
    _errorbar(ax, a[:, 0], a[:, 4:7], marker="o")
    ax.set_xscale("log")
    ax.set_xlabel("mean service time of 100-core jobs")
    ax.set_ylabel("wasted servers at saturation")
    ax.set_title("Fig. 2(a): s = 200, 1- and 100-core jobs")
    save_figure(fig, out / "fig2a_waste_two_class.png", 120)
    files += ["fig2a_waste_two_class.png", "fig2a_waste_two_class.csv"]
    return {"fig2a_points": len(rows)}


def _exact_or_nan(wl, fast: bool) -> float:
    """:func:`~jaxqueue.mjqm.exact_lambda_c` where it applies (fast: up to 8000 phases, a
    direct sparse solve), else ``nan``."""
    if fast and exact_size(wl)["phases"] > 8000:
        return float("nan")
    try:
        return float(exact_lambda_c(wl))
    except ValueError:
        return float("nan")


def _five_class_sweep(out, fast, key, files):
    """Stability limits (pile growth) and backward-sampling sweeps of the four five-class
    workloads (Figures 2-6 data), written as CSVs. Returns ``(limits, sweep rows, the
    bounded-Pareto samples at the highest load)``."""
    fracs = [0.3, 0.6, 0.85] if fast else [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95]
    n = 256 if fast else 10000
    stab, sweep, samples_bp, exact_lc = {}, [], None, {}
    srows = []
    for li, law in enumerate(LAWS):
        wl = get(f"five-class-{law}")
        r = pile_growth(
            wl,
            key=jax.random.fold_in(key, 100 + li),
            rel_tol=0.02 if fast else 0.005,
            dtype=jnp.float32,
        )
        stab[law] = r
        # the exact limit where the saturated chain is solved (phase-type laws; the full
        # run also solves the large sparse chains, minutes each)
        t0 = time.perf_counter()
        lc_exact = exact_lc[law] = _exact_or_nan(wl, fast)
        srows.append(
            [law, r.lambda_c, *r.lambda_c_ci, r.lambda_ideal, lc_exact, time.perf_counter() - t0]
        )
        for fi, f in enumerate(tqdm(fracs, desc=f"five-class-{law}", leave=False)):
            lam = f * r.lambda_c
            S = sample_backward(
                wl,
                lam,
                n,
                key=jax.random.fold_in(key, 1000 * li + fi),
                dtype=jnp.float32,
                override=True,
            )
            m = palm_metrics(wl, S, level=0.99)
            for c in m["classes"]:
                sweep.append(
                    [
                        law,
                        f,
                        lam,
                        c["cores"],
                        c["wait_mean"],
                        *c["wait_mean_ci"],
                        c["wait_var"],
                        c["wait_p90"],
                        m["hol_idle_servers"],
                        *m["hol_idle_servers_ci"],
                        m["n_unconverged"],
                    ]
                )
            if law == "bpareto" and fi == len(fracs) - 1:
                samples_bp = (wl, S)
    write_csv(
        out / "stability_five_class.csv",
        ["law", "lambda_c", "lo", "hi", "lambda_ideal", "lambda_c_exact", "exact_s"],
        srows,
    )
    head = [
        "law",
        "frac",
        "lam",
        "cores",
        "wait_mean",
        "wait_lo",
        "wait_hi",
        "wait_var",
        "wait_p90",
        "hol",
        "hol_lo",
        "hol_hi",
        "n_unconverged",
    ]
    write_csv(out / "five_class_sweep.csv", head, sweep)
    files += ["stability_five_class.csv", "five_class_sweep.csv"]
    return stab, sweep, samples_bp, exact_lc


def _select(rec, law, cores=None):
    """Rows of the five-class sweep for ``law`` (and one class), columns after the law."""
    m = rec[:, 0] == law
    if cores is not None:
        m &= rec[:, 3] == cores
    return rec[m][:, 1:].astype(float)


def _fig2(out, plt, rec, samples_bp, files) -> None:
    """Figure 2(b) (HOL waste against lambda) and 2(c) (density of waits, bounded Pareto)."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for law in LAWS:
        d = _select(rec, law, 1)
        _errorbar(ax, d[:, 1], d[:, 8:11], marker="o", label=law)
    ax.set_xlabel("arrival rate lambda")
    ax.set_ylabel("servers idle by HOL blocking")
    ax.set_title("Fig. 2(b): five classes, s = 20")
    ax.legend()
    save_figure(fig, out / "fig2b_hol_waste.png", 120)
    # Fig 2(c): density of waits, bounded Pareto.
    wl, S = samples_bp
    w = np.asarray(S.W)
    bins = np.linspace(0, max(float(np.quantile(w, 0.995)), 1e-9), 40)
    dens, p0 = wait_density(wl, S, bins)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    mid = 0.5 * (bins[1:] + bins[:-1])
    cores = [int(c) for c in np.asarray(wl.cores_array)[:, 0]]
    for c in range(dens.shape[0]):
        ax.semilogy(mid, np.where(dens[c] > 0, dens[c], np.nan), label=f"{cores[c]} cores")
    ax.set_xlabel("waiting time")
    ax.set_ylabel("density")
    ax.set_title(f"Fig. 2(c): bounded Pareto, lambda = {S.lam:.3g}")
    ax.legend()
    save_figure(fig, out / "fig2c_wait_pdf_bpareto.png", 120)
    files += ["fig2b_hol_waste.png", "fig2c_wait_pdf_bpareto.png"]


def _figs3_6(out, plt, rec, stab, cores, files) -> None:
    """Figures 3-4 (per class, one law) and 5-6 (one class, four laws)."""
    # Figs 3-4: per class, one law.
    for name, law in (("fig3_exp.png", "exp"), ("fig4_hyperexp.png", "hyperexp")):
        fig, axs = plt.subplots(1, 3, figsize=(13, 3.5))
        for c in cores:
            d = _select(rec, law, c)
            axs[0].errorbar(
                d[:, 1],
                d[:, 3],
                yerr=[d[:, 3] - d[:, 4], d[:, 5] - d[:, 3]],
                marker="o",
                label=f"{c} cores",
            )
            axs[1].plot(d[:, 1], d[:, 6], marker="o")
            axs[2].plot(d[:, 1], d[:, 7], marker="o")
        for ax, t in zip(
            axs, ["mean wait (99% CI)", "variance of wait", "90th percentile"], strict=True
        ):
            ax.axvline(stab[law].lambda_c, color="r", ls="--")
            ax.set_xlabel("lambda")
            ax.set_title(t)
        axs[0].legend()
        fig.suptitle(f"five classes, {law} service")
        save_figure(fig, out / name, 120)
        files.append(name)
    # Figs 5-6: one class, four laws.
    for name, c in (("fig5_class1.png", 1), ("fig6_class15.png", 15)):
        fig, axs = plt.subplots(1, 3, figsize=(13, 3.5))
        for law in LAWS:
            d = _select(rec, law, c)
            axs[0].errorbar(
                d[:, 1], d[:, 3], yerr=[d[:, 3] - d[:, 4], d[:, 5] - d[:, 3]], marker="o", label=law
            )
            axs[1].semilogy(d[:, 1], d[:, 6], marker="o")
            axs[2].semilogy(d[:, 1], d[:, 7], marker="o")
            axs[0].axvline(stab[law].lambda_c, ls="--", color=axs[0].lines[-1].get_color())
        axs[0].set_yscale("log")
        for ax, t in zip(axs, ["mean wait", "variance", "90th percentile"], strict=True):
            ax.set_xlabel("lambda")
            ax.set_title(f"{c}-core jobs: {t}")
        axs[0].legend()
        save_figure(fig, out / name, 120)
        files.append(name)


def _five_class(out, fast, key, plt, files):
    """Figures 2-6 of ``mjsre`` Section 8.2; returns the stability limits."""
    stab, sweep, samples_bp, exact_lc = _five_class_sweep(out, fast, key, files)
    rec = np.array(sweep, dtype=object)
    _fig2(out, plt, rec, samples_bp, files)
    cores = [int(c) for c in np.asarray(samples_bp[0].cores_array)[:, 0]]
    _figs3_6(out, plt, rec, stab, cores, files)
    res = {f"lambda_c_{law}": [stab[law].lambda_c, list(stab[law].lambda_c_ci)] for law in LAWS}
    # the exact limit beside the estimate where the saturated chain was solved (else None)
    res |= {f"lambda_c_exact_{k}": None if np.isnan(v) else v for k, v in exact_lc.items()}
    return res


def _fig7b(out, fast, key, plt, files):
    wl = get("borg-cell-b")
    r = pile_growth(
        wl,
        key=jax.random.fold_in(key, 7),
        rel_tol=0.05 if fast else 0.01,
        dtype=jnp.float32,
        max_jobs=1 << (18 if fast else 24),
    )
    fracs = [0.2, 0.5] if fast else [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    n = 32 if fast else 4096
    rows = []
    for i, f in enumerate(tqdm(fracs, desc="borg-cell-b", leave=False)):
        lam = f * r.lambda_c
        m, fw, _, _ = _backward_forward(
            wl,
            lam,
            (jax.random.fold_in(key, 70 + i), jax.random.fold_in(key, 700 + i)),
            n_samples=n,
            ell0=1024 if fast else 4096,
            n_jobs=20_000 if fast else 1_000_000,
            n_replications=8 if fast else 64,
            override=True,
        )
        rows.append(
            [
                f,
                lam,
                m["wait_mean"],
                *m["wait_mean_ci"],
                fw.wait_mean_all,
                *np.asarray(fw.wait_mean_all_ci).tolist(),
                m["n_unconverged"],
            ]
        )
    write_csv(
        out / "fig7b_borg.csv",
        ["frac", "lam", "backward", "b_lo", "b_hi", "forward", "f_lo", "f_hi", "unconv"],
        rows,
    )
    a = np.array(rows, dtype=float)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    _errorbar(ax, a[:, 1], a[:, 2:5], marker="o", label="backward (Algorithm 1)")
    _errorbar(ax, a[:, 1], a[:, 5:8], marker="s", label="forward MJSRE")
    ax.axvline(r.lambda_c, color="r", ls="--", label="lambda_c")
    ax.set_xlabel("lambda")
    ax.set_ylabel("mean waiting time")
    ax.set_title("Fig. 7(b): borg-cell-b (s = 2048, 26 classes)")
    ax.legend()
    save_figure(fig, out / "fig7b_borg.png", 120)
    files += ["fig7b_borg.png", "fig7b_borg.csv"]
    return {"lambda_c_borg": [r.lambda_c, list(r.lambda_c_ci)]}


def _exact_column(wl, ks: list[int]) -> tuple[float, list[float], list[float], float]:
    """``lambda_max`` (:func:`~jaxqueue.mjqm.exact_lambda_c`) and the exact mean waits at
    ``lam = 0.1 k lambda_max``: one jitted function (the limit, then the QBD solve at that load),
    compiled once and called once per load. A loop rather than ``jax.vmap`` over the loads: the
    vmapped solve of this workload runs batched LU factorisations that deadlock the XLA CPU
    thread pool of a 2-core machine (jaxlib 0.10.2, both pool threads wait in
    ``ParallelBatchMap``).

    Returns:
        ``(lambda_max, waits, seconds per load, compile seconds)``.
    """

    def solve(frac):
        lmax = exact_lambda_c(wl)
        return lmax, exact(wl, frac * lmax).wait_mean

    t0 = time.perf_counter()
    fn = jax.jit(solve).lower(jnp.asarray(0.1)).compile()
    t_compile = time.perf_counter() - t0
    lmax, waits, times = float("nan"), [], []
    for k in ks:
        t0 = time.perf_counter()
        lm, w = jax.block_until_ready(fn(jnp.asarray(0.1 * k)))
        times.append(time.perf_counter() - t0)
        lmax = float(lm)
        waits.append(float(w))
    return lmax, waits, times, t_compile


_TABLE1_COLUMNS = [
    "load",
    "lam",
    "exact",
    "e_time_s",
    "backward",
    "b_lo",
    "b_hi",
    "b_time_s",
    "b_covers",
    "forward",
    "f_lo",
    "f_hi",
    "f_time_s",
    "f_covers",
    "unconv",
    "b_status",
    "f_status",
]


def _table1_row(wl, k, lam, exact_w, exact_t, key, fast: bool) -> list:
    """One load of Table 1: backward sampling and a forward run from empty (Section 7.4: on
    average 50 big jobs per replication), timed, against the exact value, with their
    statuses."""
    m, fw, tb, tf = _backward_forward(
        wl,
        lam,
        (jax.random.fold_in(key, 900 + k), jax.random.fold_in(key, 950 + k)),
        n_samples=64 if fast else 4096,
        ell0=1024 if fast else 10240,
        n_jobs=10_000 if fast else 50_000,
        n_replications=16 if fast else 256,
    )
    b_lo, b_hi = m["wait_mean_ci"]
    f_lo, f_hi = np.asarray(fw.wait_mean_all_ci).tolist()
    backward = [m["wait_mean"], b_lo, b_hi, tb, int(b_lo <= exact_w <= b_hi)]
    forward = [fw.wait_mean_all, f_lo, f_hi, tf, int(f_lo <= exact_w <= f_hi)]
    return [k / 10, lam, exact_w, exact_t, *backward, *forward, m["n_unconverged"],
            m["status"], fw.status]  # fmt: skip


def _table1_plot(out, plt, a) -> None:
    fig, ax = plt.subplots(figsize=(5, 3.5))
    _errorbar(ax, a[:, 0], a[:, 4:7], marker="o", label="B-MJSRE")
    _errorbar(ax, a[:, 0], a[:, 9:12], marker="s", label="F-MJSRE (from empty)")
    ax.plot(a[:, 0], a[:, 2], "k--", marker="x", zorder=3, label="exact (QBD)")
    ax.set_yscale("log")
    ax.set_xlabel("lambda / lambda_max (exact)")
    ax.set_ylabel("mean waiting time (99% CI)")
    ax.set_title("Section 7.4: two-class-256")
    ax.legend()
    save_figure(fig, out / "table1_two_class_256.png", 120)


def _table1(out, fast, key, plt, files):
    """Table 1 of ``mjsre`` (Section 7.4) with the exact column, coverage and statuses."""
    wl = get("two-class-256")
    ks = [2, 5, 8] if fast else list(range(1, 10))
    lmax, exact_w, exact_t, exact_compile = _exact_column(wl, ks)
    rows = [
        _table1_row(wl, k, 0.1 * k * lmax, exact_w[i], exact_t[i], key, fast)
        for i, k in enumerate(tqdm(ks, desc="two-class-256", leave=False))
    ]
    write_csv(out / "table1_two_class_256.csv", _TABLE1_COLUMNS, rows)
    a = np.array([r[:-2] for r in rows], dtype=float)
    _table1_plot(out, plt, a)
    files += ["table1_two_class_256.csv", "table1_two_class_256.png"]
    b_cov, f_cov = a[:, 8].astype(bool), a[:, 13].astype(bool)
    return {
        "lambda_max_two_class_256": lmax,
        "lambda_max_two_class_256_eq8": lambda_c_closed_form(wl),
        "table1_exact_wait": exact_w,
        "table1_coverage": {
            "level": 0.99,
            "backward": f"{int(b_cov.sum())}/{len(ks)}",
            "forward": f"{int(f_cov.sum())}/{len(ks)}",
            "backward_misses": [k / 10 for k, c in zip(ks, b_cov, strict=True) if not c],
            "forward_misses": [k / 10 for k, c in zip(ks, f_cov, strict=True) if not c],
        },
        "table1_statuses": {
            "backward": [r[-2] for r in rows],
            "forward": [r[-1] for r in rows],
        },
        "table1_exact_time_s": {"compile": exact_compile, "solves": float(np.sum(exact_t))},
    }


def run(out_dir: pathlib.Path, *, fast: bool, seed: int) -> dict:
    """Compute the figures of ``mjsre`` Section 8 and the Section 7.4 comparison.

    Args:
        out_dir: folder for PNG figures and CSV data (created).
        fast: small sizes for a CPU (a few minutes); full sizes are meant for a GPU.
        seed: PRNG seed.

    Returns:
        A JSON-able summary with the stability limits found and ``files``.
    """
    plt = pyplot()
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    key = jax.random.key(seed)
    files: list[str] = []
    summary: dict = {"fast": fast, "device": str(jax.devices()[0])}
    t0 = time.perf_counter()
    for part in tqdm([_fig2a, _five_class, _table1, _fig7b], desc="mjsre study"):
        summary.update(part(out, fast, key, plt, files))
    summary["elapsed_s"] = time.perf_counter() - t0
    summary["files"] = files
    return summary
