"""Every notebook in analyses/ is committed without outputs and executes without error under nbclient,
in a kernel that runs this very interpreter (the venv's python), from a temporary working folder."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ANALYSES = Path(__file__).resolve().parents[1] / "analyses"
NOTEBOOKS = sorted(ANALYSES.glob("*.ipynb"))
KERNEL = "tlm-probe-test"
TIMEOUT_PER_CELL = 240


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    """A kernelspec whose argv is sys.executable, found first through JUPYTER_PATH."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python",
                                                  "env": {"MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1"}}))
    return root


def test_the_four_notebooks_exist():
    names = {p.stem for p in NOTEBOOKS}
    assert {"quickstart", "tapered_vs_uniform", "layer_importance", "schedules"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, kernel_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_dir))
    nb = nbformat.read(path, as_version=4)
    # first cell (added here only): prove the kernel runs the interpreter that runs the tests
    check = f"import sys\nassert sys.executable == {sys.executable!r}, sys.executable"
    nb.cells.insert(0, nbformat.v4.new_code_cell(check))
    client = NotebookClient(nb, kernel_name=KERNEL, timeout=TIMEOUT_PER_CELL,
                            resources={"metadata": {"path": str(tmp_path)}})
    started = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error
    seconds = time.perf_counter() - started
    print(f"{path.name}: {seconds:.1f} s")
