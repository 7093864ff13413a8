"""The `tlm` command lets torch's idle CPU threads sleep (OMP_WAIT_POLICY=PASSIVE) unless the user chose a
policy (or TLM_PROBE_OMP_WAIT=default). Checked by what libgomp itself reports it read (OMP_DISPLAY_ENV):
its spin count, 300,000 by default, 0 when passive. Child processes, so this process keeps its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE = ("from tlm_probe.threads import passive_omp_wait; print(passive_omp_wait()); "
        "import torch; torch.ones(256, 256) @ torch.ones(256, 256)")


def _child(env: dict, code: str = CODE) -> tuple[str, str]:
    """(what the code printed, the spin count libgomp reports it read)."""
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "TLM_PROBE_OMP_WAIT")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                       env={**base, "PYTHONPATH": str(ROOT), "OMP_DISPLAY_ENV": "VERBOSE", **env})
    spin = re.search(r"GOMP_SPINCOUNT = '(\d+)'", r.stderr)
    return r.stdout.strip(), spin.group(1) if spin else "not reported"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="torch's Linux wheels use libgomp")
def test_idle_threads_sleep_unless_the_user_chose_a_policy():
    assert _child({}) == ("True", "0")
    assert _child({"OMP_WAIT_POLICY": "ACTIVE"}) == ("False", "30000000000")
    assert _child({"TLM_PROBE_OMP_WAIT": "default"}) == ("False", "300000")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="torch's Linux wheels use libgomp")
def test_too_late_once_torch_is_loaded():
    late = "import torch; " + CODE
    assert _child({}, late) == ("False", "300000")  # libgomp read its settings when torch loaded it


def test_the_tlm_command_sets_it_before_any_command(monkeypatch):
    from tlm_probe import cli

    calls = []
    monkeypatch.setattr("tlm_probe.threads.passive_omp_wait", lambda: calls.append("omp") or True)
    monkeypatch.setattr("tlm_probe.allocator.keep_freed_memory", lambda: calls.append("malloc") or True)
    monkeypatch.setattr(cli, "app", lambda: calls.append("command"))
    cli.main()
    assert calls == ["malloc", "omp", "command"]


def test_the_development_pages_table_is_the_committed_benchmark_files():
    """Every figure of the threads table in docs/reference/development.md is the committed benchmark files'
    (python -m benchmarks.bench_omp_wait), rounded as printed: a number typed by hand fails here."""
    import json

    page = (ROOT / "docs" / "reference" / "development.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| `tlm ")}
    names = {"`tlm demo --quick`": "demo --quick",
             "`tlm train --preset tlm-tiny --steps 10`": "train tlm-tiny, 10 steps",
             "`tlm probe` SmolLM2-135M, 1,024 tokens": "probe SmolLM2-135M, 1,024 tokens"}
    assert rows.keys() == names.keys()
    for load, column in (("idle", 2), ("busy", 3)):
        measured = json.loads((ROOT / f"analyses/results/bench/omp_wait_{load}.json").read_text())["commands"]
        for row, name in names.items():
            cell = rows[row].split("|")[column].strip()
            if name not in measured:
                assert cell == "not measured"
                continue
            r, m = measured[name]["passive / default"], measured[name]
            assert m["rounds"] == 7
            assert cell.startswith(f"{r['median']:.3f}× [{r['min']:.3f}, {r['max']:.3f}]"), (load, row)
            seconds = f"({m['passive_s']['median']:.1f} s against {m['default_s']['median']:.1f} s)"
            assert seconds in cell or "(" not in cell, (load, row)
