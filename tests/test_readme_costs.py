"""Every number of the "What probing costs" table (docs/studies/costs.md, once the README's) is the median
(and min, max) of process CPU-time ratios in a committed benchmark file (analyses/results/bench/*.json),
rounded as printed: a number typed by hand, or a benchmark rerun without the page following, fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "analyses" / "results" / "bench"
SMOL = "SmolLM2-135M (GGUF, dequantised), 2x128: "
WITH_HEAD = " (both with head)"
BLOCKS = " (both blocks only, no head)"
# (file, key, what is printed: "median" or "interval" = median [min, max]), in the table's order
CELLS = [
    ("probe", "stories260K-like 5x64: probe / forward (blocks)", "interval"),
    ("probe", "MiniLM 6x384: probe / forward (blocks)", "interval"),
    ("probe", "GPT-2 768 wide, 8x256: probe / forward (blocks)", "interval"),
    ("smollm2", SMOL + "probe / forward (blocks)", "interval"),
    ("smollm2", SMOL + "tlm_probe native / plain forward (with head)", "interval"),
    ("fixed", "probe() / plain forwards, 3 batches of 8x256", "interval"),
    ("fixed", "probe() / plain forwards, 8 batches of 8x256", "interval"),
    *[("probe", f"{m}: TL run_with_cache (all hooks) + stats / tlm_probe{WITH_HEAD}", "median")
      for m in ("stories260K-like 5x64", "MiniLM 6x384", "GPT-2 768 wide, 8x256")],
    ("smollm2", SMOL + f"TL run_with_cache (all hooks) + stats / tlm_probe{WITH_HEAD}", "median"),
    *[("probe", f"{m}: nnsight trace + stats / tlm_probe{BLOCKS}", "median")
      for m in ("stories260K-like 5x64", "MiniLM 6x384", "GPT-2 768 wide, 8x256")],
    ("smollm2", SMOL + f"nnsight trace + stats / tlm_probe{BLOCKS}", "median"),
    ("ablation_floor", "probe_fused_over_restart", "interval"),
    ("ablation_floor", "probe_fused_over_floor", "median"),
    ("ablation_floor", "readout_over_floor", "median"),
]


def _section() -> str:
    text = (ROOT / "docs" / "studies" / "costs.md").read_text()
    return text.split("## What probing costs", 1)[1].split("\n## ", 1)[0]


def _results(name: str) -> dict:
    doc = json.loads((BENCH / f"{name}.json").read_text())
    res = doc["results"]
    return res.get("probe", res)  # python -m benchmarks nests its sections


def _printed(entry: dict, what: str) -> str:
    cpu = entry.get("cpu", entry)  # a ratio without a CPU clock (a share) is its own
    median = f"{cpu['median']:.3f}"
    return median if what == "median" else f"{median} [{cpu['min']:.3f}, {cpu['max']:.3f}]"


def test_every_cell_is_in_a_committed_benchmark_file_and_in_the_readme_in_order():
    section = _section()
    at = 0
    for name, key, what in CELLS:
        printed = _printed(_results(name)[key], what)
        found = section.find(printed, at)
        assert found >= 0, f"{printed} ({name}: {key}) is not in the docs' costs section after offset {at}"
        at = found + len(printed)


def test_the_table_has_no_number_the_files_do_not_give():
    section = _section()
    table = "\n".join(line for line in section.splitlines() if line.startswith("| ") and "---" not in line)
    numbers = set(re.findall(r"\d\.\d{3}", table))
    printed = [_printed(_results(name)[key], what) for name, key, what in CELLS]
    given = {n for text in printed for n in re.findall(r"\d\.\d{3}", text)}
    assert numbers <= given, sorted(numbers - given)


@pytest.mark.parametrize("name", sorted({c[0] for c in CELLS}))
def test_each_file_names_its_command_and_its_rounds(name):
    doc = json.loads((BENCH / f"{name}.json").read_text())
    assert doc.get("command", "").startswith("python -m benchmarks")
    rounds = [e["cpu"]["rounds"] for e in _results(name).values() if isinstance(e, dict) and "cpu" in e]
    assert rounds and min(rounds) >= 7
