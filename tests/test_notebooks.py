"""Every notebook runs top to bottom, so none of them rots."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted(Path(__file__).resolve().parents[1].joinpath("notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS


#: notebooks that train a sweep of their own when none is there: the slow suite runs them
TRAINS = {"toy_2d.ipynb"}


@pytest.mark.parametrize("path", [pytest.param(p, marks=[pytest.mark.slow] if p.name in TRAINS else [])
                                  for p in NOTEBOOKS], ids=lambda p: p.name)
def test_notebook_executes(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    resources = {"metadata": {"path": str(tmp_path)}}
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources=resources).execute()
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    errors = [o for cell in code for o in cell.get("outputs", []) if o.output_type == "error"]
    assert not errors
