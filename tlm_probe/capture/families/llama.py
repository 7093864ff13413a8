"""Llama-like rows: decoder layers under `layers`, the MLP at `mlp` with a down projection, final `norm`,
`lm_head`; the rows differ in block kind, where the output norms sit, and what scales the logits."""

from __future__ import annotations

from tlm_probe.capture.rows import PARALLEL, SEQUENTIAL, Adapter, fixed, par_taps, seq_taps

LLAMA_TAPS = seq_taps("post_attention_layernorm", "self_attn", "mlp", "mlp.down_proj")
_LLAMA = dict(
    layers="layers", mlp="mlp", mlp_down="mlp.down_proj", final_norm="norm", lm_head="lm_head",
    pattern="self_attn:weights",
)


def llama_like(family: str, types: tuple[str, ...], **kw) -> Adapter:
    row = {**_LLAMA, "taps": {SEQUENTIAL: LLAMA_TAPS}, "kind_of": fixed(SEQUENTIAL), **kw}
    return Adapter(family, types, **row)


_SANDWICH = {  # Gemma 2/3: each sublayer's output has its own norm before the residual add
    "resid_pre": ":in",
    "attn_out": "post_attention_layernorm:out",
    "resid_mid": "pre_feedforward_layernorm:in",
    "mlp_out": "post_feedforward_layernorm:out",
    "resid_post": ":out",
    "mlp_post": "mlp.down_proj:in",
}
_OLMO2 = {**_SANDWICH, "resid_mid": "mlp:in"}  # no pre-norm: the MLP reads the stream itself


def _softcap(c) -> str | None:
    cap = getattr(c, "final_logit_softcapping", None)
    return None if cap is None else f"the logits are soft-capped (cap x tanh(x / cap), cap {cap})"


def _logit_factor(attr: str, divides: bool):
    def why(c) -> str | None:
        value = float(getattr(c, attr, 1.0))
        op = "divided" if divides else "multiplied"
        return None if value == 1.0 else f"the logits are {op} by {attr} = {value}"

    return why


def _granite_scale(c) -> dict[str, float]:
    return {"attn_out": float(c.residual_multiplier), "mlp_out": float(c.residual_multiplier)}


LLAMA_LIKE: tuple[Adapter, ...] = (
    llama_like(
        "llama",
        ("llama", "mistral", "qwen2", "qwen3", "gemma", "olmo", "phi3", "smollm3"),
        notes="pre-norm; mlp_out is the MLP module's output",
    ),
    llama_like(
        "granite",
        ("granite",),
        scale=_granite_scale,
        head_transform=_logit_factor("logits_scaling", divides=True),
        notes="pre-norm; attn_out and mlp_out are the module outputs times residual_multiplier",
    ),
    llama_like(
        "starcoder2",
        ("starcoder2",),
        mlp_down="mlp.c_proj",
        taps={SEQUENTIAL: seq_taps("post_attention_layernorm", "self_attn", "mlp", "mlp.c_proj")},
        notes="pre-norm (LayerNorm); mlp_out is the MLP module's output",
    ),
    llama_like(
        "stablelm",
        ("stablelm",),
        taps={SEQUENTIAL: LLAMA_TAPS, PARALLEL: par_taps("self_attn", "mlp", "mlp.down_proj")},
        kind_of=lambda c: PARALLEL if c.use_parallel_residual else SEQUENTIAL,
        notes="sequential or parallel (use_parallel_residual); mlp_out is the MLP module's output",
    ),
    llama_like(
        "cohere",
        ("cohere",),
        taps={PARALLEL: par_taps("self_attn", "mlp", "mlp.down_proj")},
        kind_of=fixed(PARALLEL),
        head_transform=_logit_factor("logit_scale", divides=False),
        notes="parallel: attention and MLP read one norm of resid_pre",
    ),
    llama_like(
        "phi",
        ("phi",),
        mlp_down="mlp.fc2",
        final_norm="final_layernorm",
        taps={PARALLEL: par_taps("self_attn", "mlp", "mlp.fc2")},
        kind_of=fixed(PARALLEL),
        notes="parallel: attention and MLP read one norm of resid_pre",
    ),
    llama_like(
        "gemma2",
        ("gemma2", "gemma3_text"),
        taps={SEQUENTIAL: _SANDWICH},
        head_transform=_softcap,
        notes="sandwich norms: attn_out and mlp_out are the post-attention and post-feedforward "
        "norm outputs (what is added to the stream), resid_mid the pre-feedforward norm's input",
    ),
    llama_like(
        "olmo2",
        ("olmo2",),
        taps={SEQUENTIAL: _OLMO2},
        notes="norms on sublayer outputs, none before: attn_out and mlp_out are the post-attention "
        "and post-feedforward norm outputs",
    ),
)
