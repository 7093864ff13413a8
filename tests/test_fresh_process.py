"""Every `tlm` subcommand as a user starts it: in a fresh interpreter, where nothing is imported yet, so an
import-order bug or an import circle fails here instead of reaching a user (issue 36: `tlm data prepare
builtin:pydoc` with the default byte tokenizer died of a circular import that in-process tests, whose
modules were already imported, could not see)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from cli import app

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[list[str]]:
    group = typer.main.get_group(app)
    out = []
    for name, cmd in sorted(group.commands.items()):
        subs = getattr(cmd, "commands", None)
        out += [[name, sub] for sub in sorted(subs)] if subs else [[name]]
    return out


def _tlm(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tlm_probe", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.parametrize("command", _commands(), ids=" ".join)
def test_every_subcommand_starts_in_a_fresh_process(command):
    res = _tlm(*command, "--help")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "Usage:" in res.stdout


def test_data_prepare_with_the_default_byte_tokenizer_in_a_fresh_process(tmp_path):
    res = _tlm("data", "prepare", "builtin:pydoc", "--out", str(tmp_path / "prep"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert (tmp_path / "prep" / "meta.json").is_file()


def test_a_bad_input_in_a_fresh_process_is_one_error_line(tmp_path):
    (tmp_path / "bad.json").write_text("{")
    res = _tlm("info", str(tmp_path / "bad.json"))
    assert res.returncode == 1
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
