"""Executing the analyses/ notebooks, once for the tests and the site alike: a kernel that runs this very
interpreter, a temporary working folder, nbclient. The site shows each notebook executed: the copy under
docs/notebooks/ is what `execute` returned for the committed notebook (tests/test_notebooks.py checks that
its code cells are the committed ones, so its outputs come from the committed code). After changing a
notebook, write the copies again:

    PYTHONPATH=. .venv/bin/python tests/notebooks_exec.py [NAME ...]
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
ANALYSES = ROOT / "analyses"
SITE_COPIES = ROOT / "docs" / "notebooks"
KERNEL = "tlm-probe-test"
KERNEL_ENV = {"MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1",
              # tqdm.auto's warning that ipywidgets is missing: about the front end (this kernel has none),
              # not the notebook; it was the first thing each notebook page showed
              "PYTHONWARNINGS": "ignore:IProgress not found"}
TIMEOUT_PER_CELL = 240
SITE_TIMEOUT_PER_CELL = 1800  # writing the site's copies on a busy machine: the capture notebook's ablation
# loop (30 forwards of SmolLM2-135M) took more than 240 s under load


def kernelspec(root: Path) -> Path:
    """A kernelspec whose argv is sys.executable under `root` (put it first on JUPYTER_PATH)."""
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python",
                                                  "env": KERNEL_ENV}))
    return root


def execute(nb: nbformat.NotebookNode, workdir: Path, timeout: int = TIMEOUT_PER_CELL):
    """Run every cell of `nb` in `workdir` and return it (JUPYTER_PATH must hold kernelspec's folder);
    raises CellExecutionError, with the cell and its traceback, on any error."""
    # coalesce_streams: a progress bar's carriage returns are applied, as a notebook front end shows them
    NotebookClient(nb, kernel_name=KERNEL, timeout=timeout, coalesce_streams=True,
                   resources={"metadata": {"path": str(workdir)}}).execute()
    return nb


def code_cells(nb: nbformat.NotebookNode) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def site_copy(path: Path) -> Path:
    return SITE_COPIES / path.name


def _scrub(nb: nbformat.NotebookNode, workdir: Path) -> nbformat.NotebookNode:
    """The temporary working folder and this checkout's path out of the outputs (a file under the venv reads
    `.venv/lib/...`, as from the checkout), the kernelspec out of the metadata."""
    pattern = re.compile(f"(?:{re.escape(str(workdir))}|{re.escape(str(ROOT))})/?")
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if "text" in out:
                out["text"] = pattern.sub("", out["text"])
            for key in ("text/plain", "text/html"):
                if key in out.get("data", {}):
                    out["data"][key] = pattern.sub("", out["data"][key])
    nb.metadata.pop("kernelspec", None)
    return nb


def write_site_copies(names: list[str]) -> None:
    import os

    paths = [p for p in sorted(ANALYSES.glob("*.ipynb")) if not names or p.stem in names]
    with tempfile.TemporaryDirectory() as jupyter:
        os.environ["JUPYTER_PATH"] = str(kernelspec(Path(jupyter)))
        SITE_COPIES.mkdir(exist_ok=True)
        for path in paths:
            with tempfile.TemporaryDirectory() as work:
                nb = execute(nbformat.read(path, as_version=4), Path(work), SITE_TIMEOUT_PER_CELL)
                nbformat.write(_scrub(nb, Path(work)), site_copy(path))
            print(f"wrote {site_copy(path).relative_to(ROOT)}")


if __name__ == "__main__":
    write_site_copies(sys.argv[1:])
