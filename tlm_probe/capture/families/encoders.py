"""Encoder rows (BERT, RoBERTa, DistilBERT, ModernBERT): bidirectional, loaded as bare models, no head."""

from __future__ import annotations

from tlm_probe.capture.rows import POST_LN, SEQUENTIAL, Adapter, fixed, post_ln_taps, seq_taps

_BERT_TAPS = post_ln_taps(
    "attention.output.dense", "attention.output.LayerNorm", "output.dense", "output.LayerNorm", "output.dense"
)
_BERT_TAPS["resid_mid"] = "attention:out"  # BertAttention's output is its LayerNorm's


ENCODERS: tuple[Adapter, ...] = (
    Adapter(
        "bert",
        ("bert", "electra"),
        layers="encoder.layer",
        mlp="output",
        mlp_down="output.dense",
        final_norm=None,
        lm_head=None,
        taps={POST_LN: _BERT_TAPS},
        kind_of=fixed(POST_LN),
        is_causal=False,
        tl_architecture="BertForMaskedLM",
        setup={"chunk_size_feed_forward": 0},
        notes="post-LN encoder: mlp_out is output.dense (before the residual add and LayerNorm); a "
        "chunked feed-forward is run whole (same numbers, one call per layer)",
    ),
    Adapter(
        "roberta",
        ("roberta", "xlm-roberta", "camembert"),
        layers="encoder.layer",
        mlp="output",
        mlp_down="output.dense",
        final_norm=None,
        lm_head=None,
        taps={POST_LN: _BERT_TAPS},
        kind_of=fixed(POST_LN),
        is_causal=False,
        position_offset=2,
        tl_architecture="RobertaForMaskedLM",
        setup={"chunk_size_feed_forward": 0},
        notes="as BERT, positions start after the padding index",
    ),
    Adapter(
        "distilbert",
        ("distilbert",),
        layers="transformer.layer",
        mlp="ffn",
        mlp_down="ffn.lin2",
        final_norm=None,
        lm_head=None,
        taps={POST_LN: post_ln_taps("attention", "sa_layer_norm", "ffn", "output_layer_norm", "ffn.lin2")},
        kind_of=fixed(POST_LN),
        is_causal=False,
        setup={"ffn.chunk_size_feed_forward": 0},
        tl_refusal=fixed("TransformerLens 4 has no DistilBERT bridge"),
        notes="post-LN encoder: mlp_out is the FFN's output (before the residual add and LayerNorm)",
    ),
    Adapter(
        "modernbert",
        ("modernbert",),
        layers="layers",
        mlp="mlp",
        mlp_down="mlp.Wo",
        final_norm="final_norm",
        lm_head=None,
        taps={SEQUENTIAL: seq_taps("mlp_norm", "attn", "mlp", "mlp.Wo")},
        kind_of=fixed(SEQUENTIAL),
        is_causal=False,
        tl_refusal=fixed("TransformerLens 4 bridges only the ModernBERT decoder, not the encoder"),
        notes="pre-LN encoder (layer 0 has no attention norm)",
    ),
)


def _t5_encoder():
    from transformers import T5EncoderModel

    return T5EncoderModel


# T5's encoder stack, on its own depth axis: T5LayerFF returns x + dropout(DenseReluDense(layer_norm(x)))
T5_ENCODER = Adapter(
    "t5 (encoder stack)",
    ("t5",),
    layers="encoder.block",
    mlp="layer.1.DenseReluDense",
    mlp_down="layer.1.DenseReluDense.wo",
    final_norm="encoder.final_layer_norm",
    lm_head=None,
    taps={
        SEQUENTIAL: seq_taps(
            "layer.1.layer_norm",
            "layer.0.SelfAttention",
            "layer.1.DenseReluDense",
            "layer.1.DenseReluDense.wo",
        )
    },
    kind_of=fixed(SEQUENTIAL),
    is_causal=False,
    model_class=_t5_encoder,
    tl_refusal=fixed("the TransformerLens backend is not wired for T5's encoder stack (T5EncoderModel)"),
    notes="encoder stack only (loaded as T5EncoderModel; the decoder, with its cross-attention, is not "
    "probed: one depth axis per result table): pre-norm, mlp_out is DenseReluDense's output",
)
