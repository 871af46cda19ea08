"""``jaxqueue reproduce bf-recursive``: the studies of ``bf-recursive`` Section 6.

* Figure 9: mean service rate of premium (degree 12) and regular (degree 6) jobs vs the load,
  K = 100, for regular-only, premium-only and half/half populations (Section 4.2 formulas).
* Figure 10: the same at rho = 0.9 and 0.99 vs the ratio of regular to premium arrival rates.
* Figure 11: per-class mean service rate in the line (K = 100, d = 10; Proposition 5 with
  eq. (6)) against the overall mean service rate of the global, ring and line assignments.
* Figure 12: overall mean service rate of global / ring / line vs rho, d and K (defaults
  K = 100, d = 10, rho = 0.9).
* ``bf-clusters`` Figures 3-4 reference curves: random assignment of d = 2, 3 among S = 100.

The mean service rate of a class is ``gamma = 1 / T`` (Section 6); the overall one is
``Lambda / L = 1 / T_mean``. Every curve is exact (no simulation), so ``fast`` only thins the
grids.
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from ..pools.structured import (
    HomogeneousLine,
    HomogeneousRing,
    RandomAssignment,
    homogeneous_local_kernel,
    homogeneous_local_vs_K,
    random_assignment_bf_curve,
    random_assignment_kernel,
    random_assignment_vs_K,
    random_load_ratios,
    solve_spec,
)
from ._io import save_figure, write_csv


def differentiation_vs_load(rhos, *, K: int = 100, degrees=(6, 12)) -> dict:
    """Figure 9 data: ``gamma`` of each type vs load for three populations.

    Returns:
        ``{population: (gamma_regular, gamma_premium)}`` numpy arrays over ``rhos``; a type
        absent from a population gets the rate a job of that type would receive (the limit of
        ``1/T`` as its share goes to 0).
    """
    out = {}
    for name, p in (
        ("regular only", (1.0, 0.0)),
        ("premium only", (0.0, 1.0)),
        ("mixed", (0.5, 0.5)),
    ):
        res, _ = RandomAssignment(K, degrees, p=p).sweep(jnp.asarray(rhos))
        g = np.asarray(res.gamma)
        out[name] = (g[:, 0], g[:, 1])
    return out


def differentiation_vs_mix(ratios, rho: float, *, K: int = 100, degrees=(6, 12)):
    """Figure 10 data: ``gamma`` of (regular, premium) vs the regular/premium rate ratio."""
    ra = RandomAssignment(K, degrees, p=(0.5, 0.5))
    R = ra.ratios()
    q = jnp.asarray(ratios) / (1.0 + jnp.asarray(ratios))
    ps = jnp.stack([q, 1.0 - q], -1)
    res, _ = jax.vmap(lambda p: random_assignment_kernel(rho, R, p, 1.0))(ps)
    g = np.asarray(res.gamma)
    return g[:, 0], g[:, 1]


def locality_vs_load(rhos, *, K: int = 100, d: int = 10) -> dict:
    """Figure 12a data: overall mean service rate ``1 / T_mean`` of global, ring, line."""
    r = jnp.asarray(rhos)
    out = {}
    for name, pool in (
        ("global", RandomAssignment(K, d)),
        ("ring", HomogeneousRing(K, d)),
        ("line", HomogeneousLine(K, d)),
    ):
        res, _ = pool.sweep(r)
        out[name] = 1.0 / np.asarray(res.T_mean)
    return out


def locality_vs_degree(degrees, *, K: int = 100, rho: float = 0.9) -> dict:
    """Figure 12b data: overall mean service rate vs the degree ``d`` (one compilation)."""
    ds = jnp.asarray(degrees)
    one = jnp.ones((1,))

    def glob(d):
        return random_assignment_kernel(rho, random_load_ratios(d[None], K=K), one, 1.0)[0]

    out = {"global": 1.0 / np.asarray(jax.vmap(glob)(ds).T_mean)}
    for name, ring in (("ring", True), ("line", False)):
        res = jax.vmap(lambda d, ring=ring: homogeneous_local_kernel(rho, d, K=K, ring=ring)[0])(ds)
        out[name] = 1.0 / np.asarray(res.T_mean)
    return out


def locality_vs_size(sizes, *, d: int = 10, rho: float = 0.9) -> dict:
    """Figure 12c data: overall mean service rate vs the number of servers ``K``."""
    Ks = np.asarray(sizes)
    _, _, T = random_assignment_vs_K(rho, d, jnp.asarray(Ks), K_max=int(Ks.max()))
    out = {"global": 1.0 / np.asarray(T)}
    for name, ring in (("ring", True), ("line", False)):
        _, _, T = homogeneous_local_vs_K(rho, d, jnp.asarray(Ks), K_max=int(Ks.max()), ring=ring)
        out[name] = 1.0 / np.asarray(T)
    return out


def line_per_class(rho: float, *, K: int = 100, d: int = 10) -> np.ndarray:
    """Figure 11 data: mean service rate ``gamma_i`` of each class ``i`` of the line."""
    return np.asarray(HomogeneousLine(K, d).solve_per_class(rho).gamma)


def _figure9(plt, out_dir, rhos, fast: bool, summary: dict) -> list[str]:
    """Figure 9: service differentiation against the load (K = 100, degrees 6 / 12).

    Writes its PNG and CSVs, adds its headline numbers to ``summary``; returns the file names.
    """
    f9 = differentiation_vs_load(rhos)
    fig, axes = plt.subplots(2, 1, figsize=(6, 6), sharex=True)
    for name, (greg, gprem) in f9.items():
        if name != "regular only":
            axes[0].plot(rhos, gprem, label=name)
        if name != "premium only":
            axes[1].plot(rhos, greg, label=name)
    axes[0].set_ylabel("premium: mean service rate")
    axes[1].set_ylabel("regular: mean service rate")
    axes[1].set_xlabel("load rho")
    for a in axes:
        a.legend()
        a.grid(alpha=0.3)
    fig.suptitle("Fig. 9: service differentiation, K=100, degrees 6 / 12")
    save_figure(fig, out_dir / "fig9_differentiation_vs_load.png", 110)
    rows = [
        [float(r), name, float(f9[name][0][i]), float(f9[name][1][i])]
        for name in f9
        for i, r in enumerate(rhos)
    ]
    write_csv(
        out_dir / "fig9_differentiation_vs_load.csv",
        ["rho", "population", "gamma_regular", "gamma_premium"],
        rows,
    )
    greg, gprem = f9["mixed"]
    summary["premium_over_regular_low_load"] = float(gprem[0] / greg[0])
    summary["premium_over_regular_rho_0.9975"] = float(gprem[-1] / greg[-1])
    return ["fig9_differentiation_vs_load.png", "fig9_differentiation_vs_load.csv"]


def _figure10(plt, out_dir, rhos, fast: bool, summary: dict) -> list[str]:
    """Figure 10: the impact of the population mix at rho = 0.9 and 0.99.

    Writes its PNG and CSVs, adds its headline numbers to ``summary``; returns the file names.
    """
    mix = np.logspace(-2, 2, 41 if fast else 161)
    fig, axes = plt.subplots(2, 1, figsize=(6, 6), sharex=True)
    rows = []
    for ax, rho in zip(axes, (0.9, 0.99), strict=True):
        greg, gprem = differentiation_vs_mix(mix, rho)
        ax.semilogx(mix, gprem, label="premium")
        ax.semilogx(mix, greg, label="regular")
        ax.set_title(f"rho = {rho}")
        ax.set_ylabel("mean service rate")
        ax.legend()
        ax.grid(alpha=0.3)
        rows += [
            [rho, float(x), float(a), float(b)] for x, a, b in zip(mix, greg, gprem, strict=True)
        ]
        only_prem = differentiation_vs_load([rho], degrees=(6, 12))
        best = only_prem["premium only"]
        worst = only_prem["regular only"]
        summary[f"premium_loss_rho_{rho}"] = float(1 - worst[1][0] / best[1][0])
        summary[f"regular_loss_rho_{rho}"] = float(1 - worst[0][0] / best[0][0])
    axes[1].set_xlabel("arrival rate of regular jobs / arrival rate of premium jobs")
    fig.suptitle("Fig. 10: impact of the population mix, K=100")
    save_figure(fig, out_dir / "fig10_differentiation_vs_mix.png", 110)
    write_csv(
        out_dir / "fig10_differentiation_vs_mix.csv",
        ["rho", "regular_over_premium", "gamma_regular", "gamma_premium"],
        rows,
    )
    return ["fig10_differentiation_vs_mix.png", "fig10_differentiation_vs_mix.csv"]


def _figure11(plt, out_dir, rhos, fast: bool, summary: dict) -> list[str]:
    """Figure 11: per-class service rates of the line pool against the global and ring pools.

    Writes its PNG and CSVs, adds its headline numbers to ``summary``; returns the file names.
    """
    loads11 = (0.5, 0.9, 0.99)
    overall = locality_vs_load(np.asarray(loads11))
    fig, axes = plt.subplots(1, len(loads11), figsize=(13, 4), sharey=False)
    rows = []
    for j, (ax, rho) in enumerate(zip(axes, loads11, strict=True)):
        g = line_per_class(rho)
        ax.plot(np.arange(1, g.size + 1), g, ".", label="line, per class")
        for name, ls in (("global", "-"), ("ring", "--"), ("line", ":")):
            ax.axhline(overall[name][j], ls=ls, color="k", lw=1, label=f"{name}, overall")
        ax.set_title(f"rho = {rho}")
        ax.set_xlabel("class (first server of its range)")
        ax.grid(alpha=0.3)
        rows += [[rho, i + 1, float(v)] for i, v in enumerate(g)]
        summary[f"line_class_rate_spread_rho_{rho}"] = float(g.max() / g.min())
    axes[0].set_ylabel("mean service rate")
    axes[0].legend(fontsize=8)
    fig.suptitle("Fig. 11: impact of locality (K = 100, d = 10)")
    save_figure(fig, out_dir / "fig11_line_per_class.png", 110)
    write_csv(out_dir / "fig11_line_per_class.csv", ["rho", "class", "gamma"], rows)
    return ["fig11_line_per_class.png", "fig11_line_per_class.csv"]


def _figure12(plt, out_dir, rhos, fast: bool, summary: dict) -> list[str]:
    """Figure 12: global / ring / line pools against the load, the degree and the size.

    Writes its PNG and CSVs, adds its headline numbers to ``summary``; returns the file names.
    """
    a = locality_vs_load(rhos)
    degrees = np.arange(1, 41 if fast else 61)
    b = locality_vs_degree(degrees)
    sizes = np.unique(
        np.r_[np.arange(10, 41, 2 if fast else 1), np.linspace(40, 200, 9 if fast else 33)].astype(
            int
        )
    )
    c = locality_vs_size(sizes)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, (xs, data, xl) in zip(
        axes,
        ((rhos, a, "load rho"), (degrees, b, "degree d"), (sizes, c, "number of servers K")),
        strict=True,
    ):
        for name in ("global", "ring", "line"):
            ax.plot(xs, data[name], label=name)
        ax.set_xlabel(xl)
        ax.grid(alpha=0.3)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("mean service rate")
    axes[0].legend()
    fig.suptitle("Fig. 12: global / ring / line (defaults K = 100, d = 10, rho = 0.9)")
    save_figure(fig, out_dir / "fig12_locality_parameters.png", 110)
    files = ["fig12_locality_parameters.png"]
    for tag, xs, data, xn in (
        ("a_load", rhos, a, "rho"),
        ("b_degree", degrees, b, "d"),
        ("c_size", sizes, c, "K"),
    ):
        write_csv(
            out_dir / f"fig12{tag}.csv",
            [xn, "global", "ring", "line"],
            [
                [
                    float(x) if xn == "rho" else int(x),
                    *(float(data[k][i]) for k in ("global", "ring", "line")),
                ]
                for i, x in enumerate(xs)
            ],
        )
        files.append(f"fig12{tag}.csv")

    def hierarchy(data, skip_equal=False):
        g, r, l = (np.asarray(data[k]) for k in ("global", "ring", "line"))
        tol = 1e-9 * g
        return bool(np.all(g >= r - tol) and np.all(r >= l - tol))

    summary["hierarchy_global_ring_line_vs_load"] = hierarchy(a)
    summary["hierarchy_global_ring_line_vs_degree"] = hierarchy(b)
    summary["hierarchy_global_ring_line_vs_size"] = hierarchy(c)
    i9 = int(np.argmin(np.abs(rhos - 0.9)))
    summary["rate_at_rho_0.9"] = {k: float(v[i9]) for k, v in a.items()}
    return files


def _bf_clusters_curves(plt, out_dir, rhos, fast: bool, summary: dict) -> list[str]:
    """bf-clusters Figures 3-4: balanced fairness with d random servers among S = 100.

    Writes its PNG and CSVs, adds its headline numbers to ``summary``; returns the file names.
    """
    rows = []
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for d in (2, 3):
        delay, rate = (np.asarray(x) for x in random_assignment_bf_curve(100, d, rhos))
        axes[0].plot(rhos, delay, label=f"d = {d}")
        axes[1].plot(rhos, rate, label=f"d = {d}")
        rows += [
            [d, float(r), float(x), float(y)] for r, x, y in zip(rhos, delay, rate, strict=True)
        ]
    axes[0].set_ylabel("mean delay")
    axes[1].set_ylabel("mean service rate")
    for ax in axes:
        ax.set_xlabel("load rho")
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle("bf-clusters Figs. 3-4: balanced fairness, d random servers among S = 100")
    save_figure(fig, out_dir / "bfclusters_fig3_4_bf_curves.png", 110)
    write_csv(
        out_dir / "bfclusters_fig3_4_bf_curves.csv", ["d", "rho", "delay", "service_rate"], rows
    )
    return ["bfclusters_fig3_4_bf_curves.png", "bfclusters_fig3_4_bf_curves.csv"]


def run(out_dir: pathlib.Path, *, fast: bool, seed: int) -> dict:
    """Write the Figure 9-12 PNGs and CSVs (and the bf-clusters Figure 3-4 BF curves).

    Args:
        out_dir: output folder. fast: thinner grids. seed: unused (all curves are exact).

    Returns:
        JSON-able summary with ``files`` and the headline numbers of the qualitative findings.
    """
    # the Agg backend is chosen when a study runs, not when the module is imported
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after the backend is chosen

    del seed
    jax.config.update("jax_enable_x64", True)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    summary: dict = {}
    n = 60 if fast else 400
    rhos = np.linspace(0.0025, 0.9975, n)
    bar = tqdm(total=6, desc="bf-recursive", unit="figure", leave=False)

    for figure in (_figure9, _figure10, _figure11, _figure12, _bf_clusters_curves):
        files += figure(plt, out_dir, rhos, fast, summary)
        bar.update()
    bar.close()
    summary["files"] = [str(out_dir / f) for f in files]
    return summary


def demo_text(rho: float = 0.9) -> str:
    """Short text for ``jaxqueue demo``: structured pools of 100 servers solved exactly.

    Mean service rates (``1 / T``) of the global / ring / line assignments (K = 100, d = 10) and
    of regular / premium jobs (degrees 6 / 12, half of the load each), at load ``rho``.
    """
    rows = []
    for spec in ("random:K=100,d=10", "ring:K=100,d=10", "line:K=100,d=10"):
        res, _ = solve_spec(spec, rho=rho)
        rows.append(f"  {spec:32s} mean service rate {1.0 / float(res.T_mean):8.4f}")
    res, _ = solve_spec("random:K=100,d=6+12,p=0.5+0.5", rho=rho)
    g = np.asarray(res.gamma)
    rows.append(
        f"  {'random:K=100,d=6+12,p=0.5+0.5':32s} regular {g[0]:.4f}, premium {g[1]:.4f} "
        f"(ratio {g[1] / g[0]:.3f})"
    )
    head = (
        f"Structured pools (bf-recursive Sections 4-6), exact balanced fairness at rho = {rho}, "
        "100 servers (global > ring > line: the cost of locality):"
    )
    return "\n".join([head, *rows])
