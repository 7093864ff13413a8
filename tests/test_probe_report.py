"""Result folders: round trip, stale files of an earlier run removed, clear errors."""

from __future__ import annotations

import pandas as pd
import pytest

from tlm_probe.errors import UserError
from tlm_probe.results import read_results, write_results

TABLE = pd.DataFrame({"model": ["m", "m"], "layer": [0, 1], "statistic": ["s", "s"], "value": [0.25, -0.5]})
MATRIX = pd.DataFrame({"model": ["m"], "layer_i": [0], "layer_j": [1], "statistic": ["cka"], "value": [0.9]})


def test_round_trip_and_rewrite(tmp_path):
    out = tmp_path / "res"
    write_results(out, TABLE, MATRIX, {"backend": "native"})
    df, mat, prov = read_results(out)
    pd.testing.assert_frame_equal(df, TABLE)
    pd.testing.assert_frame_equal(mat, MATRIX)
    assert prov == {"backend": "native"}
    (out / "notes.txt").write_text("mine")
    write_results(out, TABLE.assign(value=[1.0, 2.0]), None, {"backend": "nnsight"})
    df, mat, prov = read_results(out / "results.csv")
    assert df.value.tolist() == [1.0, 2.0] and mat is None and prov["backend"] == "nnsight"
    assert (out / "notes.txt").read_text() == "mine"  # other files in DIR are left alone
    assert [p.name for p in tmp_path.iterdir()] == ["res"]  # no temporary folder left behind


def test_errors(tmp_path):
    with pytest.raises(UserError, match="no results.csv"):
        read_results(tmp_path)
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match="exists and is not a folder"):
        write_results(tmp_path / "f", TABLE, None, {})
