"""GPT-style rows: our TLM, GPT-2 and its lineage (GPT-NeoX, GPT-J, CodeGen, BLOOM, Falcon, OPT), each with
its own module names; several add the residual inside a module or change a piece in place."""

from __future__ import annotations

from tlm_probe.capture.rows import (
    PARALLEL,
    POST_LN,
    SEQUENTIAL,
    Adapter,
    fixed,
    par_taps,
    post_ln_taps,
    refuse,
    seq_taps,
)

_TLM_TAPS = {
    "resid_pre": "hook_resid_pre:out",
    "attn_out": "hook_attn_out:out",
    "resid_mid": "hook_resid_mid:out",
    "mlp_out": "hook_mlp_out:out",
    "resid_post": "hook_resid_post:out",
    "mlp_post": "mlp.hook_post:out",
}


def _falcon_kind(c) -> str:
    return PARALLEL if c.new_decoder_architecture or c.parallel_attn else SEQUENTIAL


def _falcon_tl(c) -> str | None:
    """Measured on tiny models (tests/test_families.py): the bridge's ALiBi attention differs from
    transformers' under padding (1e-3), and its QKV split fails for grouped KV heads (new layout)."""
    if c.new_decoder_architecture:
        return "TransformerLens 4's Falcon bridge cannot split the fused QKV of the new decoder layout"
    if c.alibi:
        return (
            "TransformerLens 4's Falcon bridge computes ALiBi attention unlike transformers on padded batches"
        )
    return None


def _bloom_kind(c) -> str:
    if c.apply_residual_connection_post_layernorm:
        return refuse(
            "bloom", "apply_residual_connection_post_layernorm adds the normed stream, not the stream"
        )
    if c.pretraining_tp > 1 and c.slow_but_exact:
        return refuse("bloom", "slow_but_exact tensor-parallel layers bypass the dense modules the taps read")
    return SEQUENTIAL


TLM = Adapter(
    "tlm",
    ("tlm",),
    layers="blocks",
    mlp="mlp",
    mlp_down="mlp.W_out",
    final_norm="ln_final",
    lm_head="unembed",
    taps={SEQUENTIAL: _TLM_TAPS},
    kind_of=fixed(SEQUENTIAL),
    inputs="positional",
    tl_native=True,
    pattern="attn.hook_pattern:out",
    notes="our tapered model; taps are its contract HookPoints",
)

GPT2 = Adapter(
    "gpt2",
    ("gpt2", "gpt_bigcode"),  # GPTBigCode keeps GPT-2's module names and block layout
    layers="h",
    mlp="mlp",
    mlp_down="mlp.c_proj",
    final_norm="ln_f",
    lm_head="lm_head",
    taps={SEQUENTIAL: seq_taps("ln_2", "attn", "mlp", "mlp.c_proj")},
    kind_of=fixed(SEQUENTIAL),
    pattern="attn:weights",
    notes="pre-LN; mlp_out is the MLP module's output",
)

GPT_LINEAGE: tuple[Adapter, ...] = (
    Adapter(
        "gpt_neox",
        ("gpt_neox",),
        layers="layers",
        mlp="mlp",
        mlp_down="mlp.dense_4h_to_h",
        final_norm="final_layer_norm",
        lm_head="lm_head",
        taps={
            PARALLEL: par_taps("attention", "mlp", "mlp.dense_4h_to_h"),
            SEQUENTIAL: seq_taps("post_attention_layernorm", "attention", "mlp", "mlp.dense_4h_to_h"),
        },
        kind_of=lambda c: PARALLEL if getattr(c, "use_parallel_residual", True) else SEQUENTIAL,
        pattern="attention:weights",
        notes="parallel or sequential (use_parallel_residual)",
    ),
    Adapter(
        "gptj",
        ("gptj",),
        layers="h",
        mlp="mlp",
        mlp_down="mlp.fc_out",
        final_norm="ln_f",
        lm_head="lm_head",
        taps={PARALLEL: par_taps("attn", "mlp", "mlp.fc_out")},
        kind_of=fixed(PARALLEL),
        pattern="attn:weights",
        notes="parallel: attention and MLP read one norm of resid_pre",
    ),
    Adapter(
        "codegen",
        ("codegen",),
        layers="h",
        mlp="mlp",
        mlp_down="mlp.fc_out",
        final_norm="ln_f",
        lm_head="lm_head",
        taps={PARALLEL: par_taps("attn", "mlp", "mlp.fc_out")},
        kind_of=fixed(PARALLEL),
        pattern="attn:weights",
        tl_refusal=fixed(
            "TransformerLens 4's CodeGen bridge reads CodeGenAttention.embed_positions, which "
            "transformers 5 no longer has"
        ),
        notes="parallel: attention and MLP read one norm of resid_pre",
    ),
    Adapter(
        "bloom",
        ("bloom",),
        layers="h",
        mlp="mlp",
        mlp_down="mlp.dense_4h_to_h",
        final_norm="ln_f",
        lm_head="lm_head",
        taps={
            SEQUENTIAL: {
                **seq_taps(
                    "post_attention_layernorm",
                    "self_attention.dense",
                    "mlp.dense_4h_to_h",
                    "mlp.dense_4h_to_h",
                ),
            }
        },
        kind_of=_bloom_kind,
        pattern="self_attention:weights",
        notes="its attention and MLP modules add the residual themselves: attn_out and mlp_out are their "
        "dense output projections (before that add)",
    ),
    Adapter(
        "falcon",
        ("falcon",),
        layers="h",
        mlp="mlp",
        mlp_down="mlp.dense_4h_to_h",
        final_norm="ln_f",
        lm_head="lm_head",
        taps={
            PARALLEL: par_taps("self_attention", "mlp", "mlp.dense_4h_to_h"),
            SEQUENTIAL: seq_taps("post_attention_layernorm", "self_attention", "mlp", "mlp.dense_4h_to_h"),
        },
        kind_of=_falcon_kind,
        pattern="self_attention:weights",
        tl_refusal=_falcon_tl,
        copy=frozenset({"mlp_out"}),
        notes="parallel (new_decoder_architecture or parallel_attn) or sequential; the parallel block adds "
        "attention into the MLP output in place, so mlp_out is copied when its hook fires",
    ),
    Adapter(
        "opt",
        ("opt",),
        layers="decoder.layers",
        mlp="fc2",
        mlp_down="fc2",
        final_norm="decoder.final_layer_norm",
        lm_head="lm_head",
        taps={
            SEQUENTIAL: seq_taps("final_layer_norm", "self_attn", "fc2", "fc2"),
            POST_LN: post_ln_taps("self_attn", "self_attn_layer_norm", "fc2", "final_layer_norm", "fc2"),
        },
        kind_of=lambda c: SEQUENTIAL if getattr(c, "do_layer_norm_before", True) else POST_LN,
        final_by_kind={POST_LN: "decoder.project_out"},
        pattern="self_attn:weights",
        tl_refusal=lambda c: (
            None
            if getattr(c, "do_layer_norm_before", True)
            else "TransformerLens 4's OPT bridge fails on post-LN OPT (do_layer_norm_before=False)"
        ),
        notes="pre-LN, or post-LN with do_layer_norm_before=False (OPT-350m: no final norm; project_out "
        "maps the last block's output to the head)",
    ),
)
