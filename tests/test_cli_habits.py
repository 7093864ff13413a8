"""Habits of the ecosystem: `tlm --version`, `python -m tlm_probe`, generation that slides its context window
near the model's limit, and plain progress lines when stderr is a log, not a terminal."""

from __future__ import annotations

import subprocess
import sys

import torch
import transformers
from typer.testing import CliRunner

import tlm_probe
from cli import app

runner = CliRunner()


def test_version_names_the_three_versions():
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0, res.output
    line = res.stdout.strip()
    want = (f"tlm_probe {tlm_probe.__version__}", f"torch {torch.__version__}",
            f"transformers {transformers.__version__}")
    assert all(w in line for w in want), line


def test_python_dash_m_runs_the_same_program():
    """A fresh interpreter: `python -m tlm_probe` is cli.main (the version line and a command's output)."""
    out = subprocess.run([sys.executable, "-m", "tlm_probe", "--version"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.strip() == runner.invoke(app, ["--version"]).stdout.strip()
    args = ["schedule", "--layers", "4", "--d-ff", "64", "--schedule", "uniform", "--json"]
    sub = subprocess.run([sys.executable, "-m", "tlm_probe", *args], capture_output=True, text=True)
    assert sub.returncode == 0, sub.stderr[-500:]
    assert sub.stdout == runner.invoke(app, args).stdout
