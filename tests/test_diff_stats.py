"""`tlm diff --stats` (issue 33): the per-layer difference A − B of probe statistics, checked against
`tlm probe` run on each model over the same tokens, and its CI against scipy's t interval of the
per-sequence mean differences computed here from stored activations (not by the code under test)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats
from typer.testing import CliRunner

from cli import app
from tlm_probe.api.library import probe
from tlm_probe.capture import wrap_model
from tlm_probe.diff.engine import run_diff
from tlm_probe.diff.options import DiffOptions
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.results import read_results

V, D, S, T = 64, 32, 12, 24
STATS = "align_mlp_mid,mlp_influence"
# values of one float32 forward per model: cosines carry ~1e-7 relative rounding, and the diff and the
# probe may batch and sum the same tokens in another order (float64 sums, ~1e-16)
TOL = 1e-6


def _model(d_ff=(64, 64, 64, 64), seed=0) -> TaperedLM:
    torch.manual_seed(seed)
    cfg = TLMConfig(vocab_size=V, d_model=D, n_layers=len(d_ff), n_heads=4, d_ff=tuple(d_ff), max_seq_len=64)
    return TaperedLM(cfg).eval()


@pytest.fixture(scope="module")
def ids(tmp_path_factory):
    path = tmp_path_factory.mktemp("ids") / "ids.npy"
    np.save(path, np.random.default_rng(0).integers(1, V, (S, T)).astype(np.uint32))
    return str(path)


def _per_token(model: TaperedLM, x: torch.Tensor) -> dict[str, np.ndarray]:
    """(layers, S, T) values of each statistic, from the model's own cached activations (float64)."""
    _, cache = model.run_with_cache(x, return_cache_object=False)
    n = model.cfg.n_layers

    def cos(a, b):
        a, b = a.double(), b.double()
        return ((a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))).numpy()

    h = lambda l, name: cache[f"blocks.{l}.hook_{name}"]  # noqa: E731
    return {"align_mlp_mid": np.stack([cos(h(l, "mlp_out"), h(l, "resid_mid")) for l in range(n)]),
            "mlp_influence": np.stack([1 - cos(h(l, "resid_mid"), h(l, "resid_post")) for l in range(n)])}


def test_stats_equal_probe_of_a_minus_probe_of_b(tmp_path, ids):
    save_tlm(_model(seed=0), tmp_path / "a")
    save_tlm(_model((96, 80, 48, 32), seed=1), tmp_path / "b")
    common = ["--data", ids, "--max-tokens", "0", "--device", "cpu", "--stats", STATS]
    res = CliRunner().invoke(app, ["diff", str(tmp_path / "a"), str(tmp_path / "b"), *common,
                                   "--out", str(tmp_path / "d")])
    assert res.exit_code == 0, res.output
    assert "align_mlp_mid A - B by layer" in res.output and "stats.csv" in res.output
    table = pd.read_csv(tmp_path / "d" / "stats.csv")
    assert list(table.columns) == ["model_a", "model_b", "layer", "depth", "statistic", "value_a", "value_b",
                                   "diff", "ci_low", "ci_high", "n"]
    assert len(table) == 2 * 4 and (table["n"] == S).all()
    probed = {}
    for name in ("a", "b"):  # `tlm probe` on each model, the same tokens
        out = CliRunner().invoke(app, ["probe", str(tmp_path / name), *common, "--out",
                                       str(tmp_path / f"p{name}")])
        assert out.exit_code == 0, out.output
        df = read_results(tmp_path / f"p{name}")[0]
        probed[name] = df.set_index(["statistic", "layer"])["value"]
    keys = list(zip(table["statistic"], table["layer"], strict=True))
    want_a = np.array([probed["a"][k] for k in keys])
    want_b = np.array([probed["b"][k] for k in keys])
    assert np.allclose(table["value_a"], want_a, atol=TOL, rtol=0)
    assert np.allclose(table["value_b"], want_b, atol=TOL, rtol=0)
    assert np.allclose(table["diff"], want_a - want_b, atol=TOL, rtol=0)
    assert np.abs(want_a - want_b).max() > 100 * TOL  # two different models: the check has teeth
    doc = json.loads((tmp_path / "d" / "diff.json").read_text())
    assert len(doc["stats"]) == 8 and "over sequences" in doc["stats_ci"]


def test_the_ci_is_the_paired_t_interval_over_sequences(ids):
    a, b = _model(seed=0), _model((96, 80, 48, 32), seed=1)
    res = run_diff(wrap_model(a, name="a"), wrap_model(b, name="b"),
                   DiffOptions(data=ids, stats=STATS, max_tokens=0, batch_size=5, device="cpu"))
    x = torch.from_numpy(np.load(ids).astype(np.int64))
    va, vb = _per_token(a, x), _per_token(b, x)
    for row in res.summary["stats"]:
        per_seq = (va[row["statistic"]][row["layer"]] - vb[row["statistic"]][row["layer"]]).mean(-1)  # (S,)
        low, high = stats.t.interval(0.95, S - 1, loc=per_seq.mean(), scale=stats.sem(per_seq))
        assert row["diff"] == pytest.approx(per_seq.mean(), abs=TOL)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), abs=TOL)
        assert row["n"] == S and row["n_tokens"] == S * T
    lows = np.array([r["ci_low"] for r in res.summary["stats"]])
    highs = np.array([r["ci_high"] for r in res.summary["stats"]])
    assert (highs - lows > 10 * TOL).all()  # real intervals, wider than the tolerance, not points


def test_different_depths_pair_layers_by_relative_depth(ids):
    a, b = _model((64, 64, 64, 64), seed=0), _model((64,) * 7, seed=2)
    res = run_diff(wrap_model(a, name="a"), wrap_model(b, name="b"),
                   DiffOptions(data=ids, stats="mlp_influence", max_tokens=0, device="cpu"))
    assert res.summary["drift_layers_b"] == [0, 2, 4, 6]
    pa = probe(wrap_model(a, name="a"), ids, stats="mlp_influence", max_tokens=0, device="cpu")
    pb = probe(wrap_model(b, name="b"), ids, stats="mlp_influence", max_tokens=0, device="cpu")
    va, vb = pa.set_index("layer")["value"], pb.set_index("layer")["value"]
    for row, j in zip(res.summary["stats"], (0, 2, 4, 6), strict=True):
        assert row["layer_b"] == j
        assert row["diff"] == pytest.approx(va[row["layer"]] - vb[j], abs=TOL)


def test_arm_gives_a_paired_t_interval_over_seeds(tmp_path, ids):
    cmp = tmp_path / "cmp"
    for seed in (0, 1, 2):
        save_tlm(_model(seed=10 + seed), cmp / "runs" / f"uniform-s{seed}")
        save_tlm(_model((96, 80, 48, 32), seed=20 + seed), cmp / "runs" / f"cosine:1.5:0.5-s{seed}")
    res = CliRunner().invoke(app, ["diff", str(cmp), "--arm", "cosine:1.5:0.5", "--data", ids,
                                   "--stats", STATS, "--max-tokens", "0", "--out", str(tmp_path / "d"),
                                   "--device", "cpu"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "d" / "diff.json").read_text())
    assert "over seeds" in doc["stats_ci"]
    for k, row in enumerate(doc["stats"]):
        d = np.array([p["stats"][k]["diff"] for p in doc["per_seed"]])
        low, high = stats.t.interval(0.95, 2, loc=d.mean(), scale=stats.sem(d))
        assert (row["diff"], row["ci_low"], row["ci_high"]) == pytest.approx((d.mean(), low, high))
        assert row["n"] == 3
    one = run_diff(str(cmp / "runs" / "cosine:1.5:0.5-s2"), str(cmp / "runs" / "uniform-s2"),
                   DiffOptions(data=ids, stats=STATS, max_tokens=0, device="cpu"))
    assert doc["per_seed"][2]["stats"][5]["diff"] == pytest.approx(one.summary["stats"][5]["diff"], abs=1e-12)
    assert (pd.read_csv(tmp_path / "d" / "stats.csv")["n"] == 3).all()


@pytest.mark.parametrize("spec, needle", [("ablation_dnll_mlp_zero", "importance statistics"),
                                          ("align_mlp_mdi", "unknown statistic")])
def test_bad_stats_are_one_error_line(tmp_path, ids, spec, needle):
    save_tlm(_model(), tmp_path / "a")
    res = CliRunner().invoke(app, ["diff", str(tmp_path / "a"), str(tmp_path / "a"), "--data", ids, "--stats",
                                   spec, "--out", str(tmp_path / "d")])
    assert res.exit_code == 1 and needle in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "d").exists()
