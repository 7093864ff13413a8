"""The engine refactor of issue 9 changed no number: fresh runs equal the golden tables committed before it.

The golden CSVs (tests/golden/) were made by tests/golden/make_golden.py on the code before the refactor.
Exceptions, by design: importance CI columns (now sequence-clustered, like alignment), and rows that the
old code could not produce at all (OPT and tlm --stats all crashed; only their alignment rows are golden).
The full comparison over every family is `python tests/golden/compare.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "golden"))

from compare import differences, matrix_difference, merged  # noqa: E402
from make_golden import golden_tables  # noqa: E402

from tlm_probe.stats import STATISTICS  # noqa: E402

FAMILIES = ["gpt2", "gpt_neox", "bert", "opt", "tlm"]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return golden_tables(tmp_path_factory.mktemp("golden"), FAMILIES)
    finally:
        torch.set_num_threads(before)


def test_golden_results_unchanged(fresh):
    table, _ = fresh
    m = merged(table, FAMILIES)
    assert not (m._merge == "left_only").any(), "a golden row is gone"
    new_only = m[m._merge == "right_only"]
    assert set(new_only.model) <= {"opt", "tlm"}  # their importance rows are new (the old code crashed)
    diffs = differences(m[m._merge == "both"], set(STATISTICS))
    assert all(v <= 1e-9 for v in diffs.values()), diffs
    assert len(m[m._merge == "both"]) > 250


def test_golden_matrices_unchanged(fresh):
    _, mats = fresh
    assert matrix_difference(mats, FAMILIES) <= 1e-9
    assert np.isfinite(mats.value).all()
