"""Per-layer widths declared by heterogeneous models: GGUF files with per-layer feed_forward_length / head
count arrays (written here with the `gguf` package), and OpenELM-style configs (ffn_multipliers and
num_query_heads per layer). Expected numbers are worked out by hand in the comments, not by the code."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFWriter

from tlm_probe.capture.widths import gguf_widths, openelm_widths
from tlm_probe.errors import UserError

# OpenELM-270M (apple/OpenELM's config): 16 layers, model_dim 1280, ffn_multipliers (0.5, 4.0) ->
# linspace rounded to 2 decimals: 0.5, 0.73, 0.97, 1.2, 1.43, 1.67, 1.9, 2.13, 2.37, 2.6, 2.83, 3.07, 3.3,
# 3.53, 3.77, 4.0; x 1280 = 640, 934.4, 1241.6, 1536, ...; rounded to the nearest multiple of 256
# (floor((v + 128) / 256) x 256, +256 where that is below 0.9 v: never here):
OPENELM_270M_D_FF = [
    768,
    1024,
    1280,
    1536,
    1792,
    2048,
    2560,
    2816,
    3072,
    3328,
    3584,
    3840,
    4352,
    4608,
    4864,
    5120,
]
# qkv_multipliers (0.5, 1.0) -> 0.5, 0.53, 0.57, 0.6, 0.63, 0.67, ...: x 1280, to a multiple of head_dim x
# groups = 256: 768 (12 heads of 64) for the first five; 0.67 x 1280 = 857.6 -> 768 < 0.9 x 857.6, so
# 1024 (16 heads); 0.9 x 1280 = 1152 -> 1280 (20 heads) from layer 12
OPENELM_270M_HEADS = [12] * 5 + [16] * 7 + [20] * 4
OPENELM_270M = dict(
    num_transformer_layers=16,
    model_dim=1280,
    head_dim=64,
    num_gqa_groups=4,
    ffn_multipliers=(0.5, 4.0),
    qkv_multipliers=(0.5, 1.0),
    ffn_dim_divisor=256,
)


def test_openelm_compact_config():
    w = openelm_widths(OPENELM_270M)
    assert w["d_ff"] == OPENELM_270M_D_FF
    assert w["heads"] == OPENELM_270M_HEADS
    assert w["kv_heads"] == [h // 4 for h in OPENELM_270M_HEADS]


def test_openelm_saved_config_with_per_layer_lists():
    """config.json as OpenELMConfig saves it: the multipliers and heads expanded per layer."""
    mults = [0.5, 0.73, 0.97, 1.2, 1.43, 1.67, 1.9, 2.13, 2.37, 2.6, 2.83, 3.07, 3.3, 3.53, 3.77, 4.0]
    saved = {**OPENELM_270M, "ffn_multipliers": mults, "num_query_heads": OPENELM_270M_HEADS}
    saved["num_kv_heads"] = [3] * 5 + [4] * 7 + [5] * 4
    w = openelm_widths(saved)
    assert w["d_ff"] == OPENELM_270M_D_FF and w["heads"] == OPENELM_270M_HEADS
    assert w["kv_heads"] == saved["num_kv_heads"]
    with pytest.raises(UserError, match="num_query_heads has 3 entries for 16 layers"):
        openelm_widths({**saved, "num_query_heads": [1, 2, 3]})


def _write_gguf(path, d_ff, heads, down_widths=None, d_model=16):
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(len(down_widths or d_ff))
    w.add_embedding_length(d_model)
    w.add_feed_forward_length(d_ff)  # an int, or a list: one per layer
    w.add_head_count(heads)
    for l, width in enumerate(down_widths or d_ff):
        # numpy (out, in) = (d_model, d_ff): ggml stores the reverse, ne = [d_ff, d_model]
        w.add_tensor(f"blk.{l}.ffn_down.weight", np.zeros((d_model, width), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_per_layer_arrays(tmp_path):
    path = _write_gguf(tmp_path / "tapered.gguf", [96, 64, 32], [4, 4, 2])
    assert gguf_widths(path) == {"d_ff": [96, 64, 32], "heads": [4, 4, 2]}


def test_gguf_scalar_is_every_layer(tmp_path):
    path = _write_gguf(tmp_path / "uniform.gguf", 48, 4, down_widths=[48, 48])
    assert gguf_widths(path) == {"d_ff": [48, 48], "heads": [4, 4]}


def test_gguf_declared_width_must_match_the_tensor(tmp_path):
    path = _write_gguf(tmp_path / "lying.gguf", [96, 64, 32], [4, 4, 2], down_widths=[96, 48, 32])
    with pytest.raises(
        UserError, match="layer 1 declares feed_forward_length 64 but its ffn_down tensor takes 48"
    ):
        gguf_widths(path)


def test_gguf_array_of_the_wrong_length(tmp_path):
    path = _write_gguf(tmp_path / "short.gguf", [96, 64], [4, 4], down_widths=[96, 64, 32])
    with pytest.raises(UserError, match="feed_forward_length has 2 entries for 3 layers"):
        gguf_widths(path)


def test_a_config_declaring_other_widths_than_the_weights_is_refused():
    """A Llama whose layer 1 MLP was narrowed to 40, its config carrying OpenELM-style per-layer keys (as a
    remote-code OpenELM config does; transformers 5 validates Llama's own intermediate_size as one int):
    multipliers 2.5, 1.25, 2.5 of model_dim 32 (to a multiple of 8: 80, 40, 80) pass; 1.5 at layer 1 (48) is
    refused naming the layer (the d_ff column would be wrong there)."""
    import torch
    import transformers as T
    from models_zoo import HEADS, LAYERS, VOCAB, D

    from tlm_probe.capture import wrap_model

    cfg = T.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=D,
        intermediate_size=80,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
    )
    model = T.AutoModelForCausalLM.from_config(cfg).eval()
    mlp = model.model.layers[1].mlp
    mlp.gate_proj, mlp.up_proj = torch.nn.Linear(D, 40, bias=False), torch.nn.Linear(D, 40, bias=False)
    mlp.down_proj = torch.nn.Linear(40, D, bias=False)
    openelm = dict(num_transformer_layers=LAYERS, model_dim=D, ffn_dim_divisor=8, num_query_heads=[HEADS] * 3)
    model.config.__dict__.update(openelm, ffn_multipliers=[2.5, 1.25, 2.5])
    assert wrap_model(model).d_ff == (80, 40, 80)
    model.config.__dict__["ffn_multipliers"] = [2.5, 1.5, 2.5]
    with pytest.raises(
        UserError, match="declares an MLP width of 48 at layer 1, but its down projection takes 40"
    ):
        wrap_model(model)
