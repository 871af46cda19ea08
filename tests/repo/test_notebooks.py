"""Execute every research notebook in its fast mode (JAXQUEUE_FAST=1)."""

import pathlib

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))
# Executing a notebook costs a kernel, its imports and its compilations: 28 (optimize) to
# 71 (mjsre) CPU seconds in fast mode. The default suite runs the cheapest one; the others
# run with the slow tests (`make test-slow`). Every notebook's stored outputs are checked below.
FAST_NOTEBOOKS = ("optimize",)
EXECUTED = [
    p if p.stem in FAST_NOTEBOOKS else pytest.param(p, marks=pytest.mark.slow) for p in NOTEBOOKS
]


@pytest.mark.parametrize("path", EXECUTED, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch):
    import nbclient
    import nbformat

    monkeypatch.setenv("JAXQUEUE_FAST", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count for c in code), "some code cells did not run"


def test_every_study_has_a_notebook():
    names = {p.stem for p in NOTEBOOKS}
    assert {"bf_recursive", "bf_clusters", "mjsre", "networks", "optimize"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_with_outputs_and_a_figure(path):
    """Notebooks are committed executed (``make notebooks``): every code cell has run, at
    least one cell shows a figure, and the notebook opens with the question it answers and
    ends with what it found (markdown cells)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count for c in code), "not executed: run `make notebooks`"
    assert any(c.outputs for c in code), "no stored outputs: run `make notebooks`"
    figures = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert figures, "no figure (image/png output) stored"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, "a stored output is an error"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[-1].cell_type == "markdown"
