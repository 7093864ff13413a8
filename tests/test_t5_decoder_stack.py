"""T5's decoder stack as its own model (MODEL:decoder, named so in the result table): the probe feeds its
token sequence as the encoder input and, shifted right after decoder_start_token_id, as the decoder input;
each decoder block has three sublayers (self-attention, cross-attention, T5LayerFF).

The reference is independent of the adapter row: a float64 copy of the model, run one sequence at a time
(no padding) with a decoder input shifted here, and hooks on the three sublayer *wrappers*
(T5LayerSelfAttention, T5LayerCrossAttention, T5LayerFF each return x + sublayer(norm(x))): resid_pre is
the block input, resid_mid the cross-attention wrapper's output (the stream after both attentions),
resid_post the FF wrapper's output; mlp_out = resid_post - resid_mid and attn_out = resid_mid - resid_pre
are differences, not the inner modules the row taps. The statistics' formulas are test_probe_reference's
float64 ones.

Tolerance 1e-5: the probe runs in float32 (eps 1.2e-7) through 2 blocks of width 32 (d_ff 64, 4 heads):
each piece's relative rounding error is at most ~40 eps = 5e-6 (float32 sums of <= 64 products, a softmax,
RMS norms, carried through 2 blocks), and a cosine or norm ratio of O(1) of two such pieces about twice
that: 1e-5. Measured 1.3e-8 (printed with -s).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers as T
from models_zoo import CORPUS, VOCAB, _encoder_tokenizer, _spread_weights
from test_probe_reference import _stats
from typer.testing import CliRunner

from cli import app
from tlm_probe.api.library import probe
from tlm_probe.capture import load_probe_model
from tlm_probe.capture.guardrails import GuardrailError
from tlm_probe.capture.loading import wrap_model
from tlm_probe.data.sequences import token_sequences
from tlm_probe.errors import UserError

SEQ_LEN = 16
TOL = 1e-5
START = 0  # T5 checkpoints start the decoder with their pad id


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    folder = tmp_path_factory.mktemp("t5dec") / "t5"
    torch.manual_seed(0)
    cfg = T.T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_ff=64,
        d_kv=8,
        num_layers=2,
        num_heads=4,
        dropout_rate=0.0,
        decoder_start_token_id=START,
    )
    model = T.T5ForConditionalGeneration(cfg).eval()
    _spread_weights(model)
    model.save_pretrained(folder)
    _encoder_tokenizer().save_pretrained(folder)
    return folder


def _reference(folder, seqs) -> dict[tuple[int, str], np.ndarray]:
    """(layer, statistic) -> per-token float64 values over all sequences, from the sublayer wrappers."""
    model = T.T5ForConditionalGeneration.from_pretrained(folder, dtype=torch.float64).eval()
    blocks = model.decoder.block
    seen: dict = {}

    def keep(key, which):
        def hook(module, args, out):
            seen[key] = (args[0] if which == "in" else out[0]).detach()

        return hook

    handles = []
    for l, b in enumerate(blocks):
        handles.append(b.layer[0].register_forward_hook(keep((l, "pre"), "in")))
        handles.append(b.layer[1].register_forward_hook(keep((l, "mid"), "out")))
        handles.append(b.layer[2].register_forward_hook(keep((l, "mid_in"), "in")))
        handles.append(b.layer[2].register_forward_hook(keep((l, "post"), "out")))
        handles.append(b.layer[0].register_forward_hook(keep((l, "after_self"), "out")))
    values: dict = {}
    cross_share = []
    try:
        with torch.no_grad():
            for s in seqs:
                ids = torch.tensor([s])
                dec = torch.tensor([[START, *s[:-1]]])  # shifted right here, not by the code under test
                model(input_ids=ids, decoder_input_ids=dec, use_cache=False)
                for l in range(len(blocks)):
                    pre, mid, post = seen[(l, "pre")], seen[(l, "mid")], seen[(l, "post")]
                    assert torch.equal(
                        mid, seen[(l, "mid_in")]
                    )  # the FF sublayer reads the stream after both
                    cross = mid - seen[(l, "after_self")]
                    cross_share.append(float(cross.norm() / (mid - pre).norm()))
                    for name, v in _stats(pre, mid - pre, mid, post - mid, post).items():
                        values.setdefault((l, name), []).append(v[0].numpy())
    finally:
        for h in handles:
            h.remove()
    # the cross-attention writes a real share of what the attentions add: a tap missing it would show
    assert min(cross_share) > 0.05, cross_share
    return values  # (layer, statistic) -> one array per sequence


def _pooled(values, first: int = 0) -> dict[tuple[int, str], np.ndarray]:
    """Every sequence's values from position `first` on (1: --exclude-bos, the decoder start position)."""
    return {k: np.concatenate([v[first:] for v in vs]) for k, vs in values.items()}


@pytest.fixture(scope="module")
def reference(t5):
    pm = load_probe_model(f"{t5}:decoder")
    return _reference(t5, list(token_sequences(CORPUS, SEQ_LEN, pm.tokenizer, pm.vocab_size)))


def test_decoder_stack_is_its_own_model_in_the_table(t5):
    pm = load_probe_model(f"{t5}:decoder")
    assert (pm.name, pm.n_layers, pm.d_ff, pm.block_kind) == ("t5:decoder", 2, (64, 64), "sequential_cross")
    assert type(pm.model).__name__ == "T5ForConditionalGeneration"
    assert "added to" in pm.describe()["notes"] and "cross-attention" in pm.describe()["notes"]
    enc = load_probe_model(t5)  # the plain folder is still the encoder stack, named as before
    assert (enc.name, enc.family, type(enc.model).__name__) == ("t5", "t5 (encoder stack)", "T5EncoderModel")


@pytest.mark.parametrize("backend, exclude_bos", [("native", False), ("nnsight", False), ("native", True)])
def test_decoder_stack_matches_the_float64_reference(t5, reference, backend, exclude_bos):
    # batch_size 3: sequences of different lengths share a batch, so the decoder's padding is exercised
    df = probe(
        load_probe_model(f"{t5}:decoder"),
        CORPUS,
        backend=backend,
        seq_len=SEQ_LEN,
        batch_size=3,
        max_tokens=None,
        exclude_bos=exclude_bos,
    )
    reference = _pooled(reference, int(exclude_bos))
    assert set(df.model) == {"t5:decoder"} and sorted(set(df.layer)) == [0, 1]
    assert set(df.statistic) == {s for _, s in reference}
    worst = 0.0
    for row in df.itertuples():
        expect = reference[(row.layer, row.statistic)]
        assert row.n_tokens == expect.size and row.d_ff == 64
        worst = max(worst, abs(row.value - expect.mean()))
    print(f"t5 decoder stack {backend} exclude_bos={exclude_bos}: max |probe - reference| {worst:.1e}")
    assert worst <= TOL, (backend, worst)
    prov = df.attrs["provenance"]
    assert prov["model"] == "t5:decoder"


def test_transformer_lens_refuses_the_decoder_stack_in_one_line(t5):
    with pytest.raises(UserError, match="not wired for T5's decoder stack") as e:
        probe(
            load_probe_model(f"{t5}:decoder"),
            CORPUS,
            backend="transformer-lens",
            seq_len=SEQ_LEN,
            max_tokens=None,
        )
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "piece, tap, broken",
    [
        ("resid_mid", "layer.1.layer_norm:in", "resid_mid"),  # the stream after self-attention only
        ("cross_attn_out", "layer.0.SelfAttention:out", "resid_mid"),  # the cross-attention left out
        ("mlp_out", "layer.2:out", "resid_post"),  # T5LayerFF's output includes the residual
    ],
)
def test_the_guardrail_refuses_a_wrong_decoder_row(t5, piece, tap, broken):
    pm = load_probe_model(f"{t5}:decoder")
    row = pm.adapter
    taps = {k: dict(v) | {piece: tap} for k, v in row.taps.items()}
    wrong = wrap_model(pm.model, pm.tokenizer, pm.name, pm.path, adapter=dataclasses.replace(row, taps=taps))
    with pytest.raises(GuardrailError, match=f"captured {broken} is not"):
        probe(wrong, CORPUS, seq_len=SEQ_LEN, max_tokens=None)


def test_a_stack_the_table_lacks_and_a_missing_start_token_are_refused(t5, tmp_path):
    bart = tmp_path / "bart"
    bart.mkdir()
    (bart / "config.json").write_text(json.dumps({"model_type": "bart"}))
    with pytest.raises(UserError, match=r"bart models have no 'decoder' stack .*t5:decoder"):
        load_probe_model(f"{bart}:decoder")
    nostart = tmp_path / "nostart"
    shutil.copytree(t5, nostart)
    cfg = json.loads((nostart / "config.json").read_text())
    cfg.pop("decoder_start_token_id")
    (nostart / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match="no decoder_start_token_id"):
        load_probe_model(f"{nostart}:decoder")
    with pytest.raises(UserError, match="checkpoint folder not found"):
        load_probe_model(f"{tmp_path / 'absent'}:decoder")


def test_the_cli_probes_the_decoder_stack_and_refuses_a_missing_one_in_one_line(t5, tmp_path):
    data = tmp_path / "text.txt"
    data.write_text(CORPUS[0])
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["probe", f"{t5}:decoder", "--data", str(data), "--out", str(out)])
    assert r.exit_code == 0, r.output
    bad, out2 = tmp_path / "bart", tmp_path / "out2"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "bart"}))
    r = CliRunner().invoke(app, ["probe", f"{bad}:decoder", "--data", str(data), "--out", str(out2)])
    err = r.stderr.strip()
    assert r.exit_code == 1 and "\n" not in err and "no 'decoder' stack" in err, r.output
    assert "Traceback" not in r.output and not out2.exists()


def test_importance_statistics_are_refused_with_the_reason(t5):
    """The second pass (ablations, gradients, lens, geometry) is not verified on this stack: refused before
    any forward pass (an attention ablation raised KeyError 'attn_out' after the first pass before)."""
    with pytest.raises(UserError, match="none of the asked statistics .*not verified on T5's decoder stack"):
        probe(
            load_probe_model(f"{t5}:decoder"),
            CORPUS,
            stats="ablation_shift_attn_zero,effective_rank",
            seq_len=SEQ_LEN,
            max_tokens=None,
        )
    r = probe(
        load_probe_model(f"{t5}:decoder"),
        CORPUS,
        stats="align_mlp_mid,ablation_shift_mlp_zero",
        seq_len=SEQ_LEN,
        max_tokens=None,
        full=True,
    )
    assert set(r.table.statistic) == {"align_mlp_mid"}
    assert "not verified on T5's decoder stack" in r.provenance["refused"]["ablation_shift_mlp_zero"]


def test_a_missing_stack_is_refused_by_the_folder_check_before_heavy_imports(t5, tmp_path):
    bart = tmp_path / "bart"
    bart.mkdir()
    (bart / "config.json").write_text(json.dumps({"model_type": "bart"}))
    code = (
        "import sys\n"
        "from tlm_probe.capture.adapters import check_folder\n"
        "from tlm_probe.errors import UserError\n"
        f"check_folder({f'{t5}:decoder'!r})\n"  # a stack the table has: passes
        f"try:\n    check_folder({f'{bart}:decoder'!r})\nexcept UserError as e:\n    print(e)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'nnsight') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("bart models have no 'decoder' stack") and out.strip().endswith("[]"), out
