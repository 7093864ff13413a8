"""At 80 columns (every log) a printed table cuts no number and no header: a table that does not fit is
printed as several, each whole (commands/tables.py). Run in a child with COLUMNS=80, as a log would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE_SUMMARY = """
import pandas as pd
from tlm_probe.commands import probe
stats = probe.SUMMARY_STATS
rows = [dict(model="m", layer=l, depth=l / 3, statistic=s, value=(-1) ** l * (0.123456 + k + l / 7),
             ci_low=0.0, ci_high=1.0, n_tokens=65_536, d_ff=[6144, 4096, 2048, 1024][l])
        for l in range(4) for k, s in enumerate(stats)]
table = pd.DataFrame(rows)
prov = {"model": "a-model-with-a-long-name", "architecture": {"family": "llama", "block_kind": "pre_ln"},
        "data": {"n_tokens": 65_536}, "backend": "native"}
probe._print_summary(table, prov, "OUT")
"""


def _run(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    return r.stdout


def _whole(out: str) -> None:
    """No cut cell; every table line fits in 80 columns; a line of text is printed whole (one line, never
    broken mid-sentence: a log keeps it greppable, a terminal wraps it)."""
    assert "…" not in out, out
    table = [line for line in out.splitlines() if line[:1] in "┏┃┡│└┗━┠┣"]
    assert table and max(len(line) for line in table) <= 80, out


def test_the_heads_schedule_prints_every_number_whole_at_80_columns():
    args = ("cli.py", "schedule", "--component", "heads", "--preset", "tlm-440m",
            "--schedule", "cosine:1.5:0.5")
    out = _run(*args)
    _whole(out)
    doc = json.loads(_run(*args, "--json"))
    for key in ("layer_params", "uniform_layer_params", "layer_kv_bytes"):
        assert all(f" {v:,} " in out for v in doc[key]), key
    for header in ("KV bytes/token", "block params", "uniform block params", "query heads"):
        assert header in out
    parity = [line for line in out.splitlines() if line.startswith("params ")]
    assert len(parity) == 1 and parity[0].endswith("parity: yes"), out  # the summary line is not broken


def test_the_probe_summary_prints_every_header_and_value_whole_at_80_columns():
    from tlm_probe.commands.probe import SUMMARY_STATS

    out = _run("-c", PROBE_SUMMARY)
    _whole(out)
    assert all(f" {s} " in out for s in SUMMARY_STATS), out  # headers whole
    for l in range(4):
        for k in range(len(SUMMARY_STATS)):
            value = (-1) ** l * (0.123456 + k + l / 7)
            assert f" {value:+.4f} " in out
    assert "a-model-with-a-long-name (llama, pre_ln, 65,536 tokens, backend native)" in out  # one line


def test_every_commands_description_fills_its_lines_at_80_and_120_columns():
    """A command's description is flowed to the terminal, not broken where its source lines broke (typer's
    rich mode kept those breaks: at 80 columns `tlm schedule --help` read "... derive the" / "widths from a
    probe and")."""
    from typer.main import get_group

    from tlm_probe.cli import app

    group = get_group(app)
    names = [f"{g} {c}" if c else g for g, cmd in group.commands.items()
             for c in (getattr(cmd, "commands", None) or [None])]
    for width in (80, 120):
        env = {**os.environ, "COLUMNS": str(width), "TERM": "dumb"}
        for name in names:
            r = subprocess.run([sys.executable, "cli.py", *name.split(), "--help"], capture_output=True,
                               text=True, cwd=ROOT, env=env, check=True)
            head = r.stdout.split("╭")[0].splitlines()
            text = [line.strip() for line in head[head.index(next(x for x in head if "Usage:" in x)) + 1:]]
            paragraphs = "\n".join(text).strip().split("\n\n")
            for p in paragraphs:
                lines = p.splitlines()
                short = [ln for ln in lines[:-1] if len(ln) < width - 30]
                assert not short, (name, width, lines)
