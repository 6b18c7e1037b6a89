"""Every notebook runs headless from top to bottom and draws its figures."""

from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.md"))
pytestmark = pytest.mark.ungraded


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_draws(path, monkeypatch):
    import jupytext
    import nbclient

    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel draws inline, headless
    notebook = jupytext.read(path)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    images = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if "image/png" in output.get("data", {})
    ]
    assert images, f"{path.name} drew no figure"


def test_there_are_notebooks():
    assert NOTEBOOKS
