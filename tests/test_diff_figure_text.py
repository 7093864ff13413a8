"""The diff figure at its default size (issue 47): no text cut at the figure's edge (the third panel's x
label ran past the right edge), no legend covering a point or a bar (the drift panel's legend covered its
first point; the CKA legend sat over cells and best-match marks), no text drawn over other text. Checked on
the drawn figure of a committed `tlm diff` folder and of a small synthetic one, by the window extents of
its texts and legends (tests/figure_text.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from figure_text import covered, cut, overlaps

from tlm_probe.plotting.diff import plot_diff
from tlm_probe.plotting.figures import build_figure

ROOT = Path(__file__).resolve().parents[1]
DIFFS = sorted(p for p in (ROOT / "analyses" / "results" / "confirm" / "diff").glob("*") if p.is_dir())


@pytest.mark.parametrize("folder", DIFFS[:2], ids=lambda p: p.name)
def test_a_committed_diff_figure_has_nothing_cut_or_covered(folder):
    fig = build_figure([folder], kind="diff")
    assert cut(fig) == []
    assert covered(fig) == []
    assert overlaps(fig) == []


def _synthetic(n_a: int, n_b: int, drift_first: float) -> tuple[pd.DataFrame, ...]:
    rng = np.random.default_rng(0)
    cka = pd.DataFrame([dict(layer_i=i, layer_j=j, statistic="cka_resid", value=float(rng.uniform()))
                        for i in range(n_a) for j in range(n_b)])
    depth = np.arange(n_a) / (n_a - 1)
    drift = np.r_[drift_first, rng.uniform(0.9, 1.1, n_a - 1)]
    best = rng.uniform(0.6, 0.9, n_a)
    layers = pd.concat([pd.DataFrame(dict(layer=range(n_a), depth=depth, statistic=s, value=v))
                        for s, v in (("drift_resid", drift), ("cka_best", best))])
    tokens = pd.DataFrame(dict(bucket_kind="target_count", bucket=["1-2", "3-10", "11-100", "101+"],
                               n=[394, 2447, 15273, 1_439_800], kl_mean=[0.55, 0.52, 0.53, 0.47],
                               dnll_mean=[-0.01, -0.05, -0.1, 0.2]))
    return cka, layers, tokens


@pytest.mark.parametrize("n_a, n_b, first", [(9, 9, 1.45), (4, 12, 3.0), (24, 24, 0.2)])
def test_a_synthetic_diff_figure_has_nothing_cut_or_covered(n_a, n_b, first):
    fig = plot_diff(*_synthetic(n_a, n_b, first), names=("cosine_1.5_0.5-s0", "uniform-s0"), pairing="layer",
                    n_tokens=32_768)
    assert cut(fig) == [] and covered(fig) == [] and overlaps(fig) == []
