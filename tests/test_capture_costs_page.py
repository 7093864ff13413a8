"""The capture comparison's numbers (docs/reference/python-api.md, and the README's one line) are the median,
min and max of the process CPU-time ratios in the committed benchmark file analyses/results/bench/capture.json
(`python -m benchmarks.bench_capture --threads 1 --rounds 7`), rounded as printed, and the agreement figures
are its largest differences: a number typed by hand, or a rerun without the pages following, fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "analyses" / "results" / "bench" / "capture.json"
ARMS = ("tlm_probe run_with_cache / plain forward", "TransformerLens run_with_cache / tlm_probe",
        "nnsight trace / tlm_probe", "nnterp trace / tlm_probe")
"""The page's table rows, in order (the keys' endings in the file)."""


def _results() -> dict:
    doc = json.loads(BENCH.read_text())
    assert doc["command"].startswith("python -m benchmarks.bench_capture")
    return doc["results"]


def _entry(ending: str) -> dict:
    (value,) = [v for k, v in _results().items() if k.endswith(f": {ending}")]
    return value


def _interval(entry: dict) -> str:
    cpu = entry["cpu"]
    return f"{cpu['median']:.2f} [{cpu['min']:.2f}, {cpu['max']:.2f}]"


def _e(x: float) -> str:
    """7.9e-4, 2.6e4: as the page prints a number in scientific notation."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _section() -> str:
    text = (ROOT / "docs" / "reference" / "python-api.md").read_text()
    return text.split("Capturing every layer's `mlp_out`", 1)[1].split("\n## ", 1)[0]


def test_the_pages_ratios_are_the_files_in_order():
    section, at = _section(), 0
    for arm in ARMS:
        entry = _entry(arm)
        assert entry["cpu"]["rounds"] >= 7
        found = section.find(f"| {_interval(entry)} |", at)
        assert found >= 0, f"{_interval(entry)} ({arm}) not in the page's table after offset {at}"
        at = found
    table = "\n".join(ln for ln in section.splitlines() if ln.startswith("| ") and "---" not in ln)
    given = {n for arm in ARMS for n in re.findall(r"\d\.\d\d", _interval(_entry(arm)))}
    assert set(re.findall(r"\d\.\d\d", table)) <= given


def test_the_agreement_is_the_files():
    agree = _entry("agreement with tlm_probe's mlp_out")
    section = _section()
    tl = agree["tl"]
    assert f"at most {_e(tl['max_abs_diff'])} where the largest value is {_e(tl['scale'])}" in section
    assert agree["nnsight"]["max_abs_diff"] == 0 and agree["nnterp"]["max_abs_diff"] == 0  # "bit-identical"


def test_the_readme_line_is_the_files():
    readme = (ROOT / "README.md").read_text()
    medians = [f"{_entry(arm)['cpu']['median']:.2f}×" for arm in ARMS]
    line = next(ln for ln in readme.split("\n\n") if "nnterp" in ln)
    at = 0
    for m in medians:
        at = line.find(m, at)
        assert at >= 0, (m, line)
