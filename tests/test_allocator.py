"""The `tlm` command keeps freed memory (glibc mallopt); TLM_PROBE_MALLOC=system opts out. Run in child
processes so this test process keeps the system's defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE = "from tlm_probe.allocator import keep_freed_memory; print(keep_freed_memory())"


def _child(env: dict) -> str:
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT), **env}, check=True)
    return r.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keeps_freed_memory_unless_told_not_to():
    assert _child({"TLM_PROBE_MALLOC": ""}) == "True"
    assert _child({"TLM_PROBE_MALLOC": "system"}) == "False"


def test_the_tlm_command_sets_it(monkeypatch):
    import cli

    calls = []
    monkeypatch.setattr("tlm_probe.allocator.keep_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr(cli, "app", lambda: None)
    cli.main()
    assert calls == [1]
