"""Execute every research notebook in its fast mode (JAXQUEUE_FAST=1)."""

import pathlib

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
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
