"""``jaxqueue reproduce bf-clusters``: Figures 1-4 of ``bf-clusters`` Section 5.

Mean service rate ``gamma_i`` and mean delay ``delta_i`` (eq. (9)) against the load rho under the
scheduler with random interruptions (Algorithm 1): FCFS (m = 0), m = 1, m = 5, each simulated
with 95% intervals across replications, and the exact balanced-fairness curve (the limit
m -> infinity, also exact for exponential sizes at any m):

* Figure 1: M model, mu = (1, 1, 1) (class 1 -> servers {1, 3}, class 2 -> {2, 3});
* Figure 2: M model, mu = (1, 0, 1) (class 1 -> {1, 3}, class 2 -> {3});
* Figures 3-4: random assignment of d = 2, 3 servers among S = 100;

for the bimodal, hyperexponential and Zipf job-size laws rescaled to mean 1. Exact BF curves:
``jaxqueue.pools.m_model`` (eqs. (10)-(11)) and
``jaxqueue.pools.structured.random_assignment_bf_curve`` (``bf-recursive`` eq. (17)).

Sizes: ``fast`` (a CPU, minutes): 4 loads, short runs (see ``_sizes``); full (the paper's
protocol, for a GPU): 100 replications of 10^6 jumps after 10^6 warm-up, loads 0.1, ..., 0.9.
"""

from __future__ import annotations

import pathlib
import time

import jax
import numpy as np
from tqdm.auto import tqdm

from ..dist import get_law
from ..pools import m_model
from ..pools.structured import random_assignment_bf_curve
from ..sched import ClassAssignment, RandomAssignment, as_assignment, simulate_sweep
from ._io import save_figure, write_csv

LAWS = ("bimodal", "hyperexp", "zipf")
POLICIES = (("FCFS", 0.0), ("m = 1", 1.0), ("m = 5", 5.0))
FIGURES = {
    1: ("M model, mu = (1, 1, 1)", "mmodel", False),
    2: ("M model, mu = (1, 0, 1)", "mmodel", True),
    3: ("random assignment, d = 2 of S = 100", "random", 2),
    4: ("random assignment, d = 3 of S = 100", "random", 3),
}
S_RANDOM = 100


def _sizes(fast: bool) -> dict:
    """Run sizes. ``fast``: M models 10 replications of 20,000 jumps after 5,000; random
    assignment (about 100 times more jumps per unit of time, so longer runs against the
    start-empty bias) 6 replications of 60,000 jumps after 40,000. Full: the paper's 100 runs
    of 10^6 jumps after 10^6 warm-up."""
    if fast:
        return dict(
            rhos=np.array([0.3, 0.5, 0.7, 0.85]),
            mmodel=dict(replications=10, jumps=20_000, warmup=5_000),
            random=dict(replications=6, jumps=60_000, warmup=40_000),
        )
    paper = dict(replications=100, jumps=1_000_000, warmup=1_000_000)
    return dict(rhos=np.round(np.arange(0.1, 0.95, 0.1), 2), mmodel=paper, random=paper)


def _pool(kind, arg):
    if kind == "random":
        return RandomAssignment(S_RANDOM, arg)
    if arg:  # asymmetric: servers 1 and 3 only
        return ClassAssignment([[0, 1], [1]], [1.0, 1.0])
    return ClassAssignment([[0, 2], [1, 2]], [1.0, 1.0, 1.0])


def _exact(kind, arg, rhos):
    """Exact BF delays, shape (len(rhos), classes)."""
    if kind == "random":
        delay, _ = random_assignment_bf_curve(S_RANDOM, arg, rhos)
        return np.asarray(delay)[:, None]
    mu2 = 0.0 if arg else 1.0
    total = 2.0 + mu2
    out = []
    for rho in rhos:
        lam = rho * total / 2
        out.append(np.asarray(m_model(lam, lam, 1.0, mu2, 1.0).T))
    return np.asarray(out)


def simulate_panel(kind, arg, law_name, sizes, *, key):
    """Simulate one panel (one figure, one law): every load times every policy in one call.

    Returns:
        dict policy name -> (delay, low, high) arrays of shape (loads, classes), plus the
        ``SchedResult`` under ``"_result"``.
    """
    pool = _pool(kind, arg)
    rhos = sizes["rhos"]
    total = float(np.sum(as_assignment(pool).mu))
    if isinstance(pool, RandomAssignment):
        lam_one = rhos * total
        lam = np.concatenate([lam_one for _ in POLICIES])
    else:
        lam_one = np.repeat((rhos * total / 2)[:, None], 2, axis=1)
        lam = np.concatenate([lam_one for _ in POLICIES], axis=0)
    ms = np.concatenate([np.full(len(rhos), m) for _, m in POLICIES])
    res = simulate_sweep(
        pool,
        lam,
        get_law(law_name, mean=1.0),
        ms,
        key=key,
        **sizes[kind],
        queue_size=64 if kind == "mmodel" else 256,
        max_queue_size=8192,
    )
    out = {"_result": res}
    for j, (name, _) in enumerate(POLICIES):
        sl = slice(j * len(rhos), (j + 1) * len(rhos))
        if kind == "random":
            out[name] = tuple(
                v[sl][:, None] for v in (res.delay_all, res.delay_all_low, res.delay_all_high)
            )
        else:
            out[name] = (res.delay[sl], res.delay_low[sl], res.delay_high[sl])
    return out


def _panel(ax_g, ax_d, rhos, exact, sim, fig_no, law_name, rows) -> list[float]:
    """Plot one panel (service rate above, delay below: balanced fairness and each policy with
    its interval), append its CSV rows; returns the largest relative gap of m = 5 to BF per
    class."""
    gaps = []
    n_cls = exact.shape[1]
    for i in range(n_cls):
        style = "-" if i == 0 else "--"
        lab = "" if n_cls == 1 else f" class {i + 1}"
        ax_d.plot(rhos, exact[:, i], "k" + style, label=f"BF{lab}")
        ax_g.plot(rhos, 1.0 / exact[:, i], "k" + style, label=f"BF{lab}")
        for j, (name, _) in enumerate(POLICIES):
            d, lo, hi = (v[:, i] for v in sim[name])
            color = f"C{j}"
            ax_d.plot(rhos, d, style, color=color, marker="o", ms=3, label=f"{name}{lab}")
            ax_d.fill_between(rhos, lo, hi, color=color, alpha=0.25)
            ax_g.plot(rhos, 1.0 / d, style, color=color, marker="o", ms=3, label=f"{name}{lab}")
            ax_g.fill_between(rhos, 1.0 / hi, 1.0 / lo, color=color, alpha=0.25)
            for p, rho in enumerate(rhos):
                rows.append([fig_no, law_name, name, rho, i + 1, 1.0 / d[p], 1.0 / hi[p],
                             1.0 / lo[p], d[p], lo[p], hi[p], exact[p, i]])  # fmt: skip
            if name == "m = 5":
                gaps.append(float(np.max(np.abs(d / exact[:, i] - 1.0))))
    return gaps


def run(out_dir: pathlib.Path, *, fast: bool, seed: int) -> dict:
    """Simulate and plot Figures 1-4; write ``figure{1..4}.png`` and ``bf_clusters.csv``.

    Returns:
        JSON-able summary: files, sizes, wall time, device, and per figure the largest relative
        gap between the m = 5 delays and balanced fairness, and whether any buffer overflowed
        or any point still drifted (warm-up too short for a load near saturation), and the
        statuses of the panels (``jaxqueue.sched``: ok, unconverged, nonstationary, overflow).
    """
    # the Agg backend is chosen when a study runs, not when the module is imported
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after the backend is chosen

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sizes = _sizes(fast)
    rhos = sizes["rhos"]
    key = jax.random.key(seed)
    rows = []
    summary_fig = {}
    files = []
    t0 = time.perf_counter()
    bar = tqdm(total=len(FIGURES) * len(LAWS), desc="bf-clusters", unit="panel")
    for fig_no, (title, kind, arg) in FIGURES.items():
        exact = _exact(kind, arg, rhos)
        fig, axes = plt.subplots(2, len(LAWS), figsize=(4.2 * len(LAWS), 7), squeeze=False)
        gaps, overflow, nonstationary, statuses = [], False, False, set()
        for col, law_name in enumerate(LAWS):
            panel_key = jax.random.fold_in(key, 10 * fig_no + col)
            sim = simulate_panel(kind, arg, law_name, sizes, key=panel_key)
            overflow |= sim["_result"].status == "overflow"
            nonstationary |= sim["_result"].status == "nonstationary"
            statuses.add(sim["_result"].status)
            ax_g, ax_d = axes[0, col], axes[1, col]
            gaps += _panel(ax_g, ax_d, rhos, exact, sim, fig_no, law_name, rows)
            ax_g.set_title(f"{law_name}")
            ax_g.set_ylabel("mean service rate")
            ax_d.set_ylabel("mean delay")
            ax_d.set_xlabel("load rho")
            ax_d.set_yscale("log")
            bar.update(1)
        axes[1, 0].legend(fontsize=7)
        fig.suptitle(f"Figure {fig_no}: {title}")
        path = out_dir / f"figure{fig_no}.png"
        save_figure(fig, path, 110)
        files.append(str(path))
        summary_fig[str(fig_no)] = {
            "title": title,
            "max_rel_gap_m5_vs_bf": max(gaps),
            "overflow": bool(overflow),
            "nonstationary": bool(nonstationary),
            "statuses": sorted(statuses),
        }
    bar.close()
    csv_path = out_dir / "bf_clusters.csv"
    write_csv(
        csv_path,
        ["figure", "law", "policy", "rho", "class", "service_rate", "service_rate_lo",
         "service_rate_hi", "delay", "delay_lo", "delay_hi", "delay_bf"],
        rows,
    )  # fmt: skip
    files.append(str(csv_path))
    return {
        "files": files,
        "fast": fast,
        "sizes": {k: sizes[k] for k in ("mmodel", "random")},
        "rhos": rhos.tolist(),
        "wall_s": time.perf_counter() - t0,
        "figures": summary_fig,
    }
