"""Every notebook in analyses/ is committed without outputs and executes without error under nbclient,
in a kernel that runs this very interpreter (the venv's python), from a temporary working folder
(tests/notebooks_exec.py). The site shows each executed: its copy under docs/notebooks/ has the committed
code cells, every one run, none failed."""

from __future__ import annotations

import re
import sys
import time

import nbformat
import pytest
from notebooks_exec import ANALYSES, code_cells, execute, kernelspec, site_copy

NOTEBOOKS = sorted(ANALYSES.glob("*.ipynb"))


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    """A kernelspec whose argv is sys.executable, found first through JUPYTER_PATH."""
    return kernelspec(tmp_path_factory.mktemp("jupyter"))


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
    started = time.perf_counter()
    execute(nb, tmp_path)  # raises CellExecutionError, with the cell and traceback, on any error
    seconds = time.perf_counter() - started
    print(f"{path.name}: {seconds:.1f} s")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_site_shows_the_notebook_executed_from_its_committed_code(path):
    """docs/notebooks/NAME.ipynb (a page of the site) is tests/notebooks_exec.py's execution of this very
    notebook: the same code cells, each executed in order, no error output, and outputs to show."""
    copy = site_copy(path)
    assert copy.is_file(), f"no {copy.name} in docs/notebooks: run tests/notebooks_exec.py {path.stem}"
    ran = nbformat.read(copy, as_version=4)
    nbformat.validate(ran)
    assert code_cells(ran) == code_cells(nbformat.read(path, as_version=4)), (
        f"{copy} is stale: run tests/notebooks_exec.py {path.stem}")
    cells = [c for c in ran.cells if c.cell_type == "code"]
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1))
    outputs = [o for c in cells for o in c.outputs]
    assert outputs and not [o for o in outputs if o.output_type == "error"]


ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~])/(?:[\w.+-]+/)+[\w.+-]*")
"""A POSIX absolute path in printed text (not a URL's `//host/...`, not a relative `.venv/...`)."""
MKDTEMP = re.compile(r"/tmp[a-z0-9_]{8}(?:/|$)")
"""A folder a notebook made with tempfile.mkdtemp(): a reader's run makes its own, wherever TMPDIR is."""


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_site_copy_shows_no_path_of_the_machine_that_ran_it_and_no_front_end_warning(path):
    """A reader saw /work/main/.venv/... and tqdm's "IProgress not found" (ipywidgets) above the first
    output of every notebook page: where the checkout that wrote the copies lives and which widgets its
    kernel lacks are not the notebook's."""
    cells = [c for c in nbformat.read(site_copy(path), as_version=4).cells if c.cell_type == "code"]
    texts = [o.get("text", "") + o.get("data", {}).get("text/plain", "") for c in cells for o in c.outputs]
    shown = "\n".join(texts)
    assert "IProgress not found" not in shown and "TqdmWarning" not in shown
    machine = [found for found in ABSOLUTE_PATH.findall(shown) if not MKDTEMP.search(found)]
    assert not machine, machine[:3]


def test_the_absolute_path_check_finds_one():
    found = ABSOLUTE_PATH.findall("loading /work/main/.venv/x.gguf, see https://ipywidgets.io/en/, .venv/a")
    assert found == ["/work/main/.venv/x.gguf"]
    assert MKDTEMP.search("/var/tmp/tmpzslrue7q/align.png") and not MKDTEMP.search(found[0])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_lines_fit_the_sites_code_column(path):
    """At 1280 px, with both sidebars and no prompt column (docs/stylesheets/notebooks.css), a notebook's
    code cell shows about 82 characters; longer lines scrolled sideways."""
    lines = [ln for src in code_cells(nbformat.read(path, as_version=4)) for ln in src.splitlines()]
    long = [ln for ln in lines if len(ln) > 80]
    assert not long, long
