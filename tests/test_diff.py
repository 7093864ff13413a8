"""`tlm diff` (issue 33): tests that can fail — a model against itself (CKA diagonal 1, KL 0), against a
function-preserving widened copy (extra MLP neurons whose output weights are zero), against a copy with one
layer changed (located there), and CKA against an independent computation from stored activations."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from cli import app
from tlm_probe.capture import wrap_model
from tlm_probe.diff.engine import run_diff
from tlm_probe.diff.options import DiffOptions
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.stats.cka import LayerCKA

V, D, L = 64, 32, 4


def _model(d_ff=(64, 64, 64, 64), seed=0) -> TaperedLM:
    torch.manual_seed(seed)
    cfg = TLMConfig(vocab_size=V, d_model=D, n_layers=L, n_heads=4, d_ff=tuple(d_ff), max_seq_len=64)
    return TaperedLM(cfg).eval()


def _widened(model: TaperedLM, layer: int, extra: int) -> TaperedLM:
    """The same function with `extra` more neurons in one MLP: input weights random, output weights 0."""
    d_ff = list(model.cfg.d_ff)
    d_ff[layer] += extra
    wide = _model(d_ff, seed=1)
    state = model.state_dict()
    new = wide.state_dict()
    for key, value in state.items():
        if new[key].shape == value.shape:
            new[key] = value
        else:  # the widened matrices: copy the old block, keep the new input rows random, zero new outputs
            w = new[key].clone()
            if w.shape[0] != value.shape[0]:  # (d_ff + extra, d_model): an input projection
                w[: value.shape[0]] = value
            else:  # (d_model, d_ff + extra): the output projection
                w[:, : value.shape[1]] = value
                w[:, value.shape[1]:] = 0
            new[key] = w
    wide.load_state_dict(new)
    return wide


@pytest.fixture(scope="module")
def ids(tmp_path_factory):
    path = tmp_path_factory.mktemp("ids") / "ids.npy"
    np.save(path, np.random.default_rng(0).integers(1, V, (12, 24)).astype(np.uint32))
    return str(path)


OPTS = dict(max_tokens=0, batch_size=4, device="cpu")


def test_a_model_against_itself(ids):
    m = _model()
    res = run_diff(wrap_model(m, name="a"), wrap_model(m, name="b"), DiffOptions(data=ids, **OPTS))
    assert np.allclose(np.diag(res.cka), 1.0, atol=1e-6)
    assert res.summary["kl_mean"] < 1e-12 and abs(res.summary["dnll_mean"]) < 1e-12
    assert max(res.drift) == 0.0
    assert res.summary["best_match"] == list(range(L))


def test_a_function_preserving_widened_copy(ids):
    m = _model()
    wide = _widened(m, layer=1, extra=32)
    assert wide.cfg.d_ff[1] == 96
    res = run_diff(wrap_model(m, name="a"), wrap_model(wide, name="wide"), DiffOptions(data=ids, **OPTS))
    assert res.summary["kl_mean"] < 1e-7
    assert np.allclose(np.diag(res.cka), 1.0, atol=1e-5)
    assert max(res.drift) < 1e-5


def test_a_planted_change_is_located_in_its_layer(ids):
    m = _model()
    changed = _model()
    with torch.no_grad():
        for p in changed.blocks[2].mlp.parameters():
            p.add_(0.5 * torch.randn_like(p))
    res = run_diff(wrap_model(m, name="a"), wrap_model(changed, name="b"), DiffOptions(data=ids, **OPTS))
    drift = res.drift
    assert drift[0] == 0.0 and drift[1] == 0.0  # before the change: identical streams
    assert drift[2] > 1e-3 and int(np.argmax(np.diff([0.0, *drift]))) == 2  # the jump is at layer 2
    assert res.summary["kl_mean"] > 0


def test_cka_equals_the_full_activation_computation(ids):
    a, b = _model(seed=0), _model((96, 64, 32, 64), seed=3)
    res = run_diff(wrap_model(a, name="a"), wrap_model(b, name="b"), DiffOptions(data=ids, **OPTS))
    x = torch.from_numpy(np.load(ids).astype(np.int64))
    acts, mlps = [], []
    for m in (a, b):
        _, cache = m.run_with_cache(x, return_cache_object=False)
        acts.append([cache[f"blocks.{l}.hook_resid_post"].reshape(-1, D).double().numpy() for l in range(L)])
        mlps.append([cache[f"blocks.{l}.hook_mlp_out"].reshape(-1, D).double().numpy() for l in range(L)])

    def cka(X, Y):  # Kornblith et al., from the centred activations themselves
        X, Y = X - X.mean(0), Y - Y.mean(0)
        return np.linalg.norm(Y.T @ X) ** 2 / (np.linalg.norm(X.T @ X) * np.linalg.norm(Y.T @ Y))

    want = np.array([[cka(acts[0][i], acts[1][j]) for j in range(L)] for i in range(L)])
    assert np.allclose(res.cka, want, atol=1e-6)
    want_mlp = np.array([[cka(mlps[0][i], mlps[1][j]) for j in range(L)] for i in range(L)])
    assert np.allclose(np.array(res.summary["cka_mlp"], dtype=float), want_mlp, atol=1e-6)
    assert not np.allclose(want_mlp, want, atol=1e-2)  # a different matrix, not the stream's again


def test_cka_sums_merge_exactly():
    """Two halves of the tokens accumulated apart and merged equal one pass (what ranks do)."""
    rng = np.random.default_rng(0)
    xs = [torch.from_numpy(rng.normal(size=(40, 8))) for _ in range(2)]
    ys = [torch.from_numpy(rng.normal(size=(40, 5))) for _ in range(3)]
    whole = LayerCKA(2, 8, 3, 5)
    whole.add(xs, ys)
    first, second = LayerCKA(2, 8, 3, 5), LayerCKA(2, 8, 3, 5)
    first.add([x[:17] for x in xs], [y[:17] for y in ys])
    second.add([x[17:] for x in xs], [y[17:] for y in ys])
    assert torch.allclose(first.merge_(second).value(), whole.value(), atol=1e-12)


def test_the_cli_writes_the_contract_files(tmp_path, ids):
    for name, seed in (("a", 0), ("b", 1)):
        save_tlm(_model(seed=seed), tmp_path / name)
    res = CliRunner().invoke(app, ["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--data", ids,
                                   "--out", str(tmp_path / "d"), "--device", "cpu"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "d" / "diff.json").read_text())
    assert len(doc["cka"]) == L and all(len(row) == L for row in doc["cka"])
    assert doc["kl_mean"] > 0 and len(doc["drift"]) == L
    for name in ("cka.csv", "layers.csv", "tokens.csv"):
        assert (tmp_path / "d" / name).is_file()
    assert len(doc["cka_mlp"]) == L
    # tlm plot DIFF: the heatmap shows diff.json's CKA matrix, the bars tokens.csv's frequency buckets
    from tlm_probe.plotting.figures import build_figure

    fig = build_figure([tmp_path / "d"])
    heat = fig.axes[0].images[0].get_array()
    assert np.allclose(np.asarray(heat, dtype=float), np.array(doc["cka"], dtype=float))
    buckets = [r for r in doc["buckets"] if r["bucket_kind"] == "target_count"]
    heights = sorted(round(p.get_height(), 9) for p in fig.axes[2].patches)
    assert heights == sorted(round(v, 9) for r in buckets for v in (r["kl_mean"], r["dnll_mean"]))
    plotted = CliRunner().invoke(app, ["plot", str(tmp_path / "d"), "--out", str(tmp_path / "d.png")])
    assert plotted.exit_code == 0 and (tmp_path / "d.png").stat().st_size > 10_000, plotted.output
    bad = CliRunner().invoke(app, ["diff", str(tmp_path / "a"), str(tmp_path / "nope"), "--data", ids,
                                   "--out", str(tmp_path / "e")])
    assert bad.exit_code == 1 and "Traceback" not in bad.output


def test_arm_over_a_comparison_diffs_every_seed_pair_with_intervals(tmp_path, ids):
    """`tlm diff CMP --arm ARM`: each seed pair is an ordinary diff (checked against a direct one), and the
    aggregate is the mean over seeds with a 95% t interval computed here independently."""
    from scipy import stats

    cmp = tmp_path / "cmp"
    for seed in (0, 1, 2):
        save_tlm(_model(seed=10 + seed), cmp / "runs" / f"uniform-s{seed}")
        save_tlm(_model((96, 80, 48, 32), seed=20 + seed), cmp / "runs" / f"cosine:1.5:0.5-s{seed}")
    (cmp / "runs" / "cosine:1.5:0.5-s3").mkdir()  # an unfinished seed: left out
    res = CliRunner().invoke(app, ["diff", str(cmp), "--arm", "cosine:1.5:0.5", "--data", ids,
                                   "--max-tokens", "0", "--out", str(tmp_path / "d"), "--device", "cpu"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "d" / "diff.json").read_text())
    assert doc["seeds"] == [0, 1, 2] and len(doc["per_seed"]) == 3
    direct = run_diff(str(cmp / "runs" / "cosine:1.5:0.5-s1"), str(cmp / "runs" / "uniform-s1"),
                      DiffOptions(data=ids, **OPTS))
    assert doc["per_seed"][1]["kl_mean"] == pytest.approx(direct.summary["kl_mean"], rel=1e-9)
    kls = np.array([p["kl_mean"] for p in doc["per_seed"]])
    low, high = stats.t.interval(0.95, 2, loc=kls.mean(), scale=kls.std(ddof=1) / np.sqrt(3))
    got = (doc["kl"]["mean"], doc["kl"]["ci_low"], doc["kl"]["ci_high"])
    assert got == pytest.approx((kls.mean(), low, high))
    cell = [p["cka"][2][1] for p in doc["per_seed"]]
    assert doc["cka"][2][1] == pytest.approx(np.mean(cell)) and doc["cka_ci"][2][1]["n_seeds"] == 3
    assert "over seeds 0, 1, 2" in res.output
    from tlm_probe.plotting.figures import build_figure

    build_figure([tmp_path / "d"])  # the aggregate draws like a single diff
    for args, needle in ((["--arm", "wider-late"], "no finished seed of both"),
                         (["--arm", "uniform"], "both 'uniform'")):
        bad = CliRunner().invoke(app, ["diff", str(cmp), *args, "--data", ids, "--out", str(tmp_path / "e")])
        assert bad.exit_code == 1 and needle in bad.output and "Traceback" not in bad.output, bad.output
    both = CliRunner().invoke(app, ["diff", str(cmp), str(cmp / "runs" / "uniform-s0"), "--arm", "x",
                                    "--data", ids, "--out", str(tmp_path / "e")])
    assert both.exit_code == 1 and "MODEL_B is not given" in both.output
