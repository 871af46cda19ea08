"""Files the studies write: CSV tables and PNG figures."""

from __future__ import annotations

import csv
import pathlib


def write_csv(path: pathlib.Path, header: list[str], rows) -> None:
    """Write ``header`` then ``rows`` (numbers at full precision: ``str`` round-trips)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def pyplot():
    """``matplotlib.pyplot`` on the file-only ``Agg`` backend (a study draws no window)."""
    import matplotlib  # chosen before pyplot loads; not on import of a study

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after the backend is chosen

    return plt


def save_figure(fig, path: pathlib.Path, dpi: int) -> None:
    """``tight_layout``, save as PNG, close (so that long studies do not keep figures open)."""
    plt = pyplot()
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
