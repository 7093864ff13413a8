"""`tlm trust` (issue 33 part 2): Kendall's W against the Friedman statistic (an independent formula), W = 1
on two copies of one corpus, and the flags on planted disagreements."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from cli import app
from tlm_probe.errors import UserError
from tlm_probe.trust.agreement import judge, kendall_w
from tlm_probe.trust.options import TrustOptions


@pytest.mark.parametrize("m,n,seed", [(3, 9, 0), (5, 12, 1), (2, 6, 2)])
def test_kendall_w_is_the_friedman_statistic_scaled(m, n, seed):
    values = np.random.default_rng(seed).normal(size=(m, n))  # no ties
    chi2 = stats.friedmanchisquare(*values.T).statistic  # blocks = corpora, treatments = layers
    assert kendall_w(values) == pytest.approx(chi2 / (m * (n - 1)), rel=1e-12)


def test_w_is_one_for_agreeing_and_zero_for_opposite_rankings():
    row = np.arange(8.0)
    assert kendall_w(np.vstack([row, row * 3 + 1])) == pytest.approx(1.0)
    assert kendall_w(np.vstack([row, -row])) == pytest.approx(0.0)


def test_judge_flags_a_corpus_dependent_and_a_disagreeing_proxy():
    target = np.array([[9, 5, 3, 1, 0.5, 0.2]] * 3, dtype=float)
    table = {
        "ablation_dnll_mlp_zero": target,
        "good_proxy": target * 2 + 0.1,  # the same order everywhere
        "reversed_proxy": -target,  # the opposite order of the target, stable across corpora
        "unstable_proxy": np.array([[1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1], [3, 1, 6, 2, 5, 4]], dtype=float),
    }
    rows = {r["statistic"]: r for r in judge(table, "ablation_dnll_mlp_zero", 0.7, 0.5)}
    assert rows["good_proxy"]["flags"] == "ok" and rows["good_proxy"]["kendall_w"] == pytest.approx(1.0)
    assert rows["reversed_proxy"]["flags"] == "disagrees with ablation_dnll_mlp_zero"
    assert "ranking changes with the corpus" in rows["unstable_proxy"]["flags"]
    assert rows["ablation_dnll_mlp_zero"]["spearman_with_target"] is None


def test_options_refuse_one_corpus_and_a_target_not_probed():
    with pytest.raises(UserError, match="at least twice"):
        TrustOptions(data=("a",))
    with pytest.raises(UserError, match="--target"):
        TrustOptions(data=("a", "b"), stats="block_influence")


def test_one_corpus_twice_is_refused_before_any_probe(tmp_path):
    """Two copies of one corpus agree perfectly by construction (W = 1 whatever the statistic): a vacuous
    check, refused in one line (issue 49) — by name, by another path, or as a byte copy."""
    ids = tmp_path / "ids.npy"
    np.save(ids, np.random.default_rng(0).integers(5, 100, (8, 32)).astype(np.uint32))
    copy = tmp_path / "copy.npy"
    copy.write_bytes(ids.read_bytes())
    (tmp_path / "sub").mkdir()
    for a, b in ((ids, copy), (ids, tmp_path / "sub" / ".." / "ids.npy"), ("builtin:pydoc", "builtin:pydoc")):
        res = CliRunner().invoke(app, ["trust", str(tmp_path / "no-model"), "--data", str(a), "--data",
                                       str(b), "--out", str(tmp_path / "t")])
        assert res.exit_code == 1, res.output
        assert res.output.count("error:") == 1 and "is the same corpus as --data" in res.output
        assert not (tmp_path / "t").exists()
