"""Holm-adjusted p in a comparison's paired table (the family: the arms tested against one baseline),
checked against the step-down procedure worked by hand."""

import math

import numpy as np
import pandas as pd

from tlm_probe.train.compare_tables import holm, paired_table


def test_holm_closed_form():
    # sorted 0.01, 0.03, 0.04 -> 3*0.01 = 0.03, 2*0.03 = 0.06, max(0.06, 1*0.04) = 0.06; NaN is no test
    p = pd.Series([0.04, 0.01, math.nan, 0.03], index=list("abcd"))
    out = holm(p)
    assert out["b"] == 0.03 and out["d"] == 0.06 and out["a"] == 0.06 and math.isnan(out["c"])
    assert holm(pd.Series([0.6, 0.7])).tolist() == [1.0, 1.0]  # capped at 1


def test_paired_table_adjusts_within_each_baseline():
    rng = np.random.default_rng(0)
    rows = []
    for mixer in ("attention", "titans"):
        for arm, shift in (("uniform", 0.0), ("a", -0.05), ("b", 0.01), ("c", 0.2)):
            for seed in range(4):
                loss = 4.0 + shift + rng.normal(0, 0.02)
                rows.append({"arm": f"{mixer}/{arm}", "mixer": mixer, "schedule": arm, "seed": seed,
                             "val_loss": loss})
    table = paired_table(pd.DataFrame(rows), {m: f"{m}/uniform" for m in ("attention", "titans")},
                         ("val_loss",))
    for _, group in table.groupby("baseline"):
        raw = sorted(group["val_loss_p"])
        expect = np.minimum(1, np.maximum.accumulate([3 * raw[0], 2 * raw[1], raw[2]]))
        got = group.set_index("val_loss_p").loc[raw, "val_loss_p_holm"].to_numpy()
        assert np.allclose(got, expect, rtol=0, atol=1e-15)
