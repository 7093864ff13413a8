"""Encoder rows (BERT, RoBERTa, DistilBERT, ModernBERT): bidirectional, loaded as bare models, no head."""

from __future__ import annotations

from tlm_probe.capture.rows import (
    POST_LN,
    SEQUENTIAL,
    SEQUENTIAL_CROSS,
    Adapter,
    fixed,
    post_ln_taps,
    seq_taps,
)

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
        pattern="attention.self:weights",
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
        pattern="attention.self:weights",
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
        pattern="attention:weights",
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
        pattern="attn:weights",
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
    pattern="layer.0.SelfAttention:weights",
    tl_refusal=fixed("the TransformerLens backend is not wired for T5's encoder stack (T5EncoderModel)"),
    notes="encoder stack only (loaded as T5EncoderModel; the decoder stack is probed as its own model, "
    "MODEL:decoder): pre-norm, mlp_out is DenseReluDense's output",
)


def _t5_seq2seq():
    from transformers import T5ForConditionalGeneration

    return T5ForConditionalGeneration


# T5's decoder stack, asked for as MODEL:decoder and named so in the table (its own depth axis). Each block
# is layer.0 self-attention, layer.1 cross-attention (over the encoder's output), layer.2 T5LayerFF, each
# x + sublayer(layer_norm(x)); the MLP output is added to the stream after both attentions.
T5_DECODER = Adapter(
    "t5 (decoder stack)",
    ("t5",),
    layers="decoder.block",
    mlp="layer.2.DenseReluDense",
    mlp_down="layer.2.DenseReluDense.wo",
    final_norm="decoder.final_layer_norm",
    lm_head=None,  # the head reads position t as token t, not t+1: no next-token logits, no logit lens
    taps={
        SEQUENTIAL_CROSS: {
            "resid_pre": ":in",
            "self_attn_out": "layer.0.SelfAttention:out",
            "cross_attn_out": "layer.1.EncDecAttention:out",
            "resid_mid": "layer.2.layer_norm:in",
            "mlp_out": "layer.2.DenseReluDense:out",
            "resid_post": ":out",
            "mlp_post": "layer.2.DenseReluDense.wo:in",
        }
    },
    kind_of=fixed(SEQUENTIAL_CROSS),
    is_causal=False,  # self-attention is causal, but the stack is not a language model over the probe's text
    inputs="seq2seq_decoder",
    model_class=_t5_seq2seq,
    tl_refusal=fixed("the TransformerLens backend is not wired for T5's decoder stack"),
    importance_refusal="not verified on T5's decoder stack (its attention output is two sublayers, no "
    "one module to ablate; ablations would re-run the encoder too and compare logits): alignment "
    "statistics only",
    notes="decoder stack (MODEL:decoder, loaded as T5ForConditionalGeneration): the probe's token "
    "sequence is both the encoder input and, shifted right after decoder_start_token_id, the decoder "
    "input (position t reads tokens < t and the whole encoded sequence); pre-norm blocks with three "
    "sublayers: attn_out is self-attention + cross-attention output, resid_mid the stream after both, "
    "which mlp_out (DenseReluDense's output) is added to",
)

STACKS: dict[tuple[str, str], Adapter] = {("t5", "decoder"): T5_DECODER}
"""(model_type, stack) -> the row probing that stack of an encoder-decoder as its own model (MODEL:stack)."""
