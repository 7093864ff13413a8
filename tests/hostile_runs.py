"""Shared by the hostile-input tests: run a command on a hostile input (in this process, or in a child under
a memory cap, as a user meets a huge file) and get its one `error:` line; and a minimal lm-eval task file."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from cli import app

ROOT = Path(__file__).resolve().parents[1]
CAP = 3 * 2**30
"""The child's address-space cap: a bound that fails to hold shows as a MemoryError, not a slow machine."""
TASK_YAML = """task: mytask
dataset_path: json
dataset_kwargs:
  data_files:
    test: t.jsonl
output_type: multiple_choice
test_split: test
doc_to_text: "{{context}}"
doc_to_choice: "{{choices}}"
doc_to_target: label
metric_list:
  - metric: acc
"""
"""An lm-eval task reading t.jsonl beside it (context, choices, label)."""


def capped(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`tlm ARGS` in a child process under CAP bytes of address space."""
    return subprocess.run([sys.executable, "-m", "tlm_probe", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP)))


def error_lines(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.startswith("error:")]


def one_refusal(args: list[str], in_child: bool = False, timeout: float = 300) -> str:
    """The one `error:` line of `tlm ARGS` (exit 1, no traceback), run here or in a capped child."""
    if in_child:
        p = capped(*args, timeout=timeout)
        code, output = p.returncode, p.stdout + p.stderr
    else:
        r = CliRunner().invoke(app, args)
        code, output = r.exit_code, r.output
    assert code == 1, (args, output[-2000:])
    assert "Traceback" not in output
    (line,) = error_lines(output)
    return line
