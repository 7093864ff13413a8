"""Small untruths that cost trust (issue 35, item 8): what a caption, a warning, a duration or a refusal
says matches what was done."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from tlm_probe.plotting.inputs import Comparison
from tlm_probe.report.html import FigureBlock
from tlm_probe.report.sections import training_section


def _curves(n_seeds: int) -> pd.DataFrame:
    std = 0.05 if n_seeds > 1 else math.nan
    rows = [dict(arm=arm, metric="val_loss", tokens=t, mean=3.0 - 0.1 * t, std=std, n_seeds=n_seeds)
            for arm in ("uniform", "cosine:1.5:0.5") for t in (1, 2, 3)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("n_seeds, says, never", [(1, "no band", "± 1 std"), (3, "± 1 std", "no band")])
def test_the_loss_curves_caption_promises_a_band_only_when_one_is_drawn(tmp_path, n_seeds, says, never):
    section = training_section(Comparison(tmp_path, {}, _curves(n_seeds)), "compare", 0, (400, 300), 50)
    block = next(b for b in section.blocks if isinstance(b, FigureBlock))
    title = block.make()._suptitle.get_text()
    assert says in block.caption and never not in block.caption, block.caption
    assert says in title and never not in title, title


def test_the_demo_says_not_evidence_once_and_counts_start_up(monkeypatch, tmp_path):
    import time

    import tlm_probe
    from tlm_probe.commands import demo as demo_cmd

    summary = [dict(arm=a, val_loss_mean=5.13, val_ppl_mean=169.6, val_bpb_mean=7.41, params=279_104)
               for a in ("uniform", "cosine:1.5:0.5")]
    paired = [{"arm": "cosine:1.5:0.5", "baseline": "uniform", "n_pairs": 1, "val_loss_diff_mean": 0.0124,
               "val_loss_diff_ci_low": math.nan, "val_loss_diff_ci_high": math.nan, "val_loss_p": math.nan}]
    doc = {"summary": summary, "paired": paired, "wall_seconds": 6.0, "figures_alignment": "demo/a.png"}
    monkeypatch.setattr(tlm_probe, "STARTED", time.perf_counter() - 18.7)  # the imports took 12.7 s
    monkeypatch.setattr(demo_cmd.console, "width", 80)
    with demo_cmd.console.capture() as cap:
        demo_cmd.print_summary(doc, tmp_path / "demo")
    lines = cap.get().splitlines()
    assert sum("not evidence" in line for line in lines) == 1, lines
    assert sum("--seeds 0,1,2" in line for line in lines) == 1, lines
    assert any(line.startswith("cosine:1.5:0.5 - uniform") and line.endswith("difference)") for line in lines)
    assert any(re.search(r"in 1[89] s;", line) for line in lines), lines  # not the 6 s the library timed
    assert len(lines) == 5  # two arms, one paired sentence, the advice, where it wrote: none broken in two
