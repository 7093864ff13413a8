"""The LayerNorm Scaling pilot's table on the docs site (docs/how-to/compare.md) equals its committed
effects.csv to the digits shown, and effects.csv recomputes from runs.csv (paired t over seeds, scipy)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "analyses" / "results" / "lns_pilot"
ROWS = {"taper (cosine − uniform), no LNS": "taper | none", "taper, with LNS": "taper | lns",
        "LNS on the uniform stack": "lns | uniform",
        "interaction (taper with LNS − taper without)": "interaction"}


def _effects_from_runs() -> dict[str, np.ndarray]:
    runs = pd.read_csv(RESULTS / "runs.csv")
    w = runs.pivot_table(index="seed", columns=["arm", "norm_scaling"], values="val_loss")
    taper = {s: w[("cosine:1.5:0.5", s)] - w[("uniform", s)] for s in ("none", "lns")}
    return {"taper | none": taper["none"], "taper | lns": taper["lns"],
            "lns | uniform": w[("uniform", "lns")] - w[("uniform", "none")],
            "interaction": taper["lns"] - taper["none"]}


def test_page_table_is_the_committed_effects_and_they_recompute():
    effects = pd.read_csv(RESULTS / "effects.csv").set_index("effect")
    for name, d in _effects_from_runs().items():
        d = d.to_numpy()
        lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        row = effects.loc[name]
        # runs.csv holds 6 significant digits (val_loss ~4.9: 1e-5 nats), so the recomputation agrees to that
        assert (row["mean"], row["ci_low"], row["ci_high"]) == pytest.approx((d.mean(), lo, hi), abs=3e-5)
        assert row["p"] == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue, rel=2e-3)
    page = (ROOT / "docs" / "how-to" / "compare.md").read_text().replace("−", "-")
    for label, name in ROWS.items():
        m = re.search(rf"\| {re.escape(label.replace('−', '-'))} \| (\S+) \[(\S+), (\S+)\] \| (\S+) \|", page)
        assert m, label
        row = effects.loc[name]
        for printed, value in zip(m.groups(), (row["mean"], row["ci_low"], row["ci_high"], row["p"]),
                                  strict=True):
            digits = len(printed.split(".")[1])
            assert abs(float(printed) - value) <= 0.5 * 10**-digits + 1e-9, (label, printed, value)
