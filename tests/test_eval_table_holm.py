"""The study's downstream table adjusts each metric's paired p-values over the arms (Holm), as the
validation-loss table does. Before, it printed the unadjusted p alone: with ten arms tested against one
baseline, a p of 0.03 read as evidence that Holm's correction removes."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from scipy import stats

from analyses.study_summary import eval_table

SEEDS = (0, 1, 2, 3)
PPL = {"uniform": [10.0, 11.0, 12.0, 13.0], "a": [9.0, 10.5, 11.2, 12.1], "b": [10.1, 11.3, 12.0, 13.4]}


def _study(tmp_path):
    folder = tmp_path / "allocation"
    folder.mkdir()
    fixed = {"mixer": "attention", "params": 100, "flops_per_token": 1, "tokens_per_s": 1.0, "val_loss": 1.0,
             "val_ppl": 2.7, "val_bpb": 1.0}
    runs = [{"arm": arm, "seed": s, "schedule": arm, **fixed} for arm in PPL for s in SEEDS]
    pd.DataFrame(runs).to_csv(folder / "results.csv", index=False)
    (folder / "compare.json").write_text(json.dumps({"baseline": "uniform"}))
    for arm, values in PPL.items():
        for seed, v in zip(SEEDS, values, strict=True):
            out = tmp_path / "eval" / "allocation" / f"{arm}-s{seed}"
            out.mkdir(parents=True)
            pd.DataFrame({"task": ["ood"], "metric": ["ppl"], "value": [v]}).to_csv(out / "results.csv",
                                                                                  index=False)
    return folder


def test_eval_cells_carry_holm_adjusted_p(tmp_path):
    table = eval_table(tmp_path / "eval", _study(tmp_path))
    raw = {arm: stats.ttest_rel(PPL[arm], PPL["uniform"]).pvalue for arm in ("a", "b")}
    order = sorted(raw, key=raw.get)  # Holm by hand: smallest p times m, the next times m - 1, monotone
    adjusted = {order[0]: min(1.0, 2 * raw[order[0]])}
    adjusted[order[1]] = min(1.0, max(adjusted[order[0]], raw[order[1]]))
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()[2:]}
    for arm in ("a", "b"):
        assert f"p {raw[arm]:.2g}, Holm {adjusted[arm]:.2g})" in rows[arm]
    assert not np.isclose(raw["a"], adjusted["a"])  # the case tests the adjustment, not the identity
    assert "Holm" not in rows["uniform"]
