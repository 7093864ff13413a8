"""The table of architecture adapters: where each model family keeps its layers and sublayers.

All architecture knowledge lives in ADAPTERS (module paths, block kind, how the model is called, position
offsets, scale factors, how TransformerLens wraps it); nothing else in the package branches on a family or
model type. rows.py says what a row holds and what each piece means.

Block kinds: "sequential" pre-LN (resid_mid = resid_pre + attn_out, resid_post = resid_mid + mlp_out),
"parallel" (attention and MLP both read resid_pre; resid_post = resid_pre + attn_out + mlp_out; there is no
resid_mid tap: the probe uses resid_pre + attn_out, the stream the MLP output is added to), and "post_ln"
(BERT: resid_mid is LayerNorm(resid_pre + attn_out), resid_post is LayerNorm(resid_mid + mlp_out)).

To add a family: add one Adapter row below with its Hugging Face `model_type` values and taps; the
guardrails (every tap fires, the pieces add up) tell you at once if a path is wrong.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from tlm_probe.capture.rows import (
    BLOCK_KINDS,
    MIXER_ONLY,
    PARALLEL,
    PIECES,
    POST_LN,
    SEQUENTIAL,
    Adapter,
    fixed,
    par_taps,
    post_ln_taps,
    refuse,
    seq_taps,
    split_tap,
)
from tlm_probe.errors import UserError
from tlm_probe.models.config_file import CONFIG, read_config_json

__all__ = ["ADAPTERS", "BLOCK_KINDS", "PARALLEL", "PIECES", "POST_LN", "SEQUENTIAL", "Adapter", "adapter_for"]
__all__ += ["split_tap"]

_BERT_TAPS = post_ln_taps(
    "attention.output.dense", "attention.output.LayerNorm", "output.dense", "output.LayerNorm", "output.dense"
)
_BERT_TAPS["resid_mid"] = "attention:out"  # BertAttention's output is its LayerNorm's

_TLM_TAPS = {
    "resid_pre": "hook_resid_pre:out",
    "attn_out": "hook_attn_out:out",
    "resid_mid": "hook_resid_mid:out",
    "mlp_out": "hook_mlp_out:out",
    "resid_post": "hook_resid_post:out",
    "mlp_post": "mlp.hook_post:out",
}

_LLAMA_TAPS = seq_taps("post_attention_layernorm", "self_attn", "mlp", "mlp.down_proj")
_LLAMA = dict(layers="layers", mlp="mlp", mlp_down="mlp.down_proj", final_norm="norm", lm_head="lm_head")


def _llama_like(family: str, types: tuple[str, ...], **kw) -> Adapter:
    row = {**_LLAMA, "taps": {SEQUENTIAL: _LLAMA_TAPS}, "kind_of": fixed(SEQUENTIAL), **kw}
    return Adapter(family, types, **row)


def _moe(family: str, types: tuple[str, ...], shared: tuple[str, ...] = (), **kw) -> Adapter:
    """Mixture of experts: the MLP piece is the whole sparse block's output (router, experts, shared
    experts); no neuron tap, since routed experts have no one down projection per layer."""
    taps = {SEQUENTIAL: {k: v for k, v in _LLAMA_TAPS.items() if k != "mlp_post"}}
    notes = "mixture of experts: mlp_out is the whole sparse block's output (routed + shared experts)"
    return _llama_like(
        family, types, taps=taps, experts="mlp.experts", shared_experts=shared, notes=notes, **kw
    )


_SANDWICH = {  # Gemma 2/3: each sublayer's output has its own norm before the residual add
    "resid_pre": ":in",
    "attn_out": "post_attention_layernorm:out",
    "resid_mid": "pre_feedforward_layernorm:in",
    "mlp_out": "post_feedforward_layernorm:out",
    "resid_post": ":out",
    "mlp_post": "mlp.down_proj:in",
}
_OLMO2 = {**_SANDWICH, "resid_mid": "mlp:in"}  # no pre-norm: the MLP reads the stream itself


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


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
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
        notes="our tapered model; taps are its contract HookPoints",
    ),
    Adapter(
        "gpt2",
        ("gpt2", "gpt_bigcode"),  # GPTBigCode keeps GPT-2's module names and block layout
        layers="h",
        mlp="mlp",
        mlp_down="mlp.c_proj",
        final_norm="ln_f",
        lm_head="lm_head",
        taps={SEQUENTIAL: seq_taps("ln_2", "attn", "mlp", "mlp.c_proj")},
        kind_of=fixed(SEQUENTIAL),
        notes="pre-LN; mlp_out is the MLP module's output",
    ),
    _llama_like(
        "llama",
        ("llama", "mistral", "qwen2", "qwen3", "gemma", "olmo", "phi3", "smollm3"),
        notes="pre-norm; mlp_out is the MLP module's output",
    ),
    _llama_like(
        "granite",
        ("granite",),
        scale=_granite_scale,
        head_transform=_logit_factor("logits_scaling", divides=True),
        notes="pre-norm; attn_out and mlp_out are the module outputs times residual_multiplier",
    ),
    _llama_like(
        "starcoder2",
        ("starcoder2",),
        mlp_down="mlp.c_proj",
        taps={SEQUENTIAL: seq_taps("post_attention_layernorm", "self_attn", "mlp", "mlp.c_proj")},
        notes="pre-norm (LayerNorm); mlp_out is the MLP module's output",
    ),
    _llama_like(
        "stablelm",
        ("stablelm",),
        taps={SEQUENTIAL: _LLAMA_TAPS, PARALLEL: par_taps("self_attn", "mlp", "mlp.down_proj")},
        kind_of=lambda c: PARALLEL if c.use_parallel_residual else SEQUENTIAL,
        notes="sequential or parallel (use_parallel_residual); mlp_out is the MLP module's output",
    ),
    _llama_like(
        "cohere",
        ("cohere",),
        taps={PARALLEL: par_taps("self_attn", "mlp", "mlp.down_proj")},
        kind_of=fixed(PARALLEL),
        head_transform=_logit_factor("logit_scale", divides=False),
        notes="parallel: attention and MLP read one norm of resid_pre",
    ),
    _llama_like(
        "phi",
        ("phi",),
        mlp_down="mlp.fc2",
        final_norm="final_layernorm",
        taps={PARALLEL: par_taps("self_attn", "mlp", "mlp.fc2")},
        kind_of=fixed(PARALLEL),
        notes="parallel: attention and MLP read one norm of resid_pre",
    ),
    _llama_like(
        "gemma2",
        ("gemma2", "gemma3_text"),
        taps={SEQUENTIAL: _SANDWICH},
        head_transform=_softcap,
        notes="sandwich norms: attn_out and mlp_out are the post-attention and post-feedforward "
        "norm outputs (what is added to the stream), resid_mid the pre-feedforward norm's input",
    ),
    _llama_like(
        "olmo2",
        ("olmo2",),
        taps={SEQUENTIAL: _OLMO2},
        notes="norms on sublayer outputs, none before: attn_out and mlp_out are the post-attention "
        "and post-feedforward norm outputs",
    ),
    _moe("mixtral", ("mixtral", "qwen3_moe", "olmoe", "gpt_oss")),
    _moe("qwen2_moe", ("qwen2_moe",), shared=("mlp.shared_expert",)),
    _moe("deepseek_v3", ("deepseek_v3",), shared=("mlp.shared_experts",)),
    Adapter(
        "mamba",
        ("mamba",),
        layers="layers",
        mlp=None,
        mlp_down=None,
        final_norm="norm_f",
        lm_head="lm_head",
        taps={MIXER_ONLY: {"resid_pre": ":in", "attn_out": "mixer:out", "resid_post": ":out"}},
        kind_of=fixed(MIXER_ONLY),
        tl_refusal=fixed("its Mamba bridge's hooks are not mapped onto the probe's pieces yet"),
        notes="no MLP: attn_out is the mixer's output; only block-level statistics (resid_pre, resid_post)",
    ),
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
        tl_refusal=lambda c: (
            None
            if getattr(c, "do_layer_norm_before", True)
            else "TransformerLens 4's OPT bridge fails on post-LN OPT (do_layer_norm_before=False)"
        ),
        notes="pre-LN, or post-LN with do_layer_norm_before=False (OPT-350m: no final norm; project_out "
        "maps the last block's output to the head)",
    ),
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

_BY_TYPE = {t: a for a in ADAPTERS for t in a.model_types}
_USER: dict[str, Adapter] = {}
"""Rows a user added or overrode (register_adapter, `tlm probe --adapter FILE`); looked up first."""


def register_adapter(row: Adapter) -> None:
    """Add or override a row without editing the package: `row` serves its model_types from now on (in
    this process). The guardrails prove it on the loaded model before any statistic is computed."""
    for t in row.model_types:
        _USER[t] = row


def adapter_source(row: Adapter) -> str:
    """ "user" for a registered row, "table" for one of ADAPTERS (recorded in provenance)."""
    return "user" if any(r is row for r in _USER.values()) else "table"


def adapter_for(model_type: str | None) -> Adapter:
    """The row serving `model_type`, or a UserError naming the closest known type and how to add a row."""
    if model_type in _USER:
        return _USER[model_type]
    if model_type in _BY_TYPE:
        return _BY_TYPE[model_type]
    families = "; ".join(f"{a.family} ({', '.join(a.model_types)})" for a in ADAPTERS)
    close = difflib.get_close_matches(str(model_type), list(_BY_TYPE), n=1, cutoff=0.5)
    closest = f"Closest known type: {close[0]} ({_BY_TYPE[close[0]].family} row). " if close else ""
    raise UserError(
        f"unsupported architecture {model_type!r}. {closest}Supported families: {families}. To add one "
        "without editing the package, pass `tlm probe --adapter ROW.json` (a row: layers, mlp, mlp_down, "
        "final_norm, lm_head, block_kind, taps) or call tlm_probe.capture.adapters.register_adapter; "
        "or add an Adapter row (layer path + taps) to ADAPTERS in tlm_probe/capture/adapters.py"
    )


ROW_FIELDS = {
    "family",
    "model_types",
    "layers",
    "mlp",
    "mlp_down",
    "final_norm",
    "lm_head",
    "block_kind",
    "taps",
    "is_causal",
}


def load_adapter_file(path: str | Path) -> Adapter:
    """A row from a JSON file: {"family", "model_types": [...], "layers", "mlp", "mlp_down", "final_norm",
    "lm_head", "block_kind": "sequential" | "parallel" | "post_ln", "taps": {piece: "path:in|out"},
    "is_causal" (default true)}."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read adapter file {path}: {e}") from e
    if not isinstance(raw, dict):
        raise UserError(f"adapter file {path}: expected a JSON object (a row), got {type(raw).__name__}")
    unknown, missing = set(raw) - ROW_FIELDS, ROW_FIELDS - {"is_causal"} - set(raw)
    if unknown or missing:
        raise UserError(
            f"adapter file {path}: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}"
        )
    kind = raw["block_kind"]
    if kind not in BLOCK_KINDS:
        raise UserError(f"adapter file {path}: block_kind {kind!r} is not one of {', '.join(BLOCK_KINDS)}")
    return Adapter(
        str(raw["family"]),
        tuple(raw["model_types"]),
        layers=raw["layers"],
        mlp=raw["mlp"],
        mlp_down=raw["mlp_down"],
        final_norm=raw["final_norm"],
        lm_head=raw["lm_head"],
        taps={kind: dict(raw["taps"])},
        kind_of=fixed(kind),
        is_causal=bool(raw.get("is_causal", True)),
        notes=f"user row from {path}",
    )


def check_folder(source: str | Path) -> None:
    """Refuse a local checkpoint folder whose config.json names a model type no row serves, before the
    caller imports torch, transformers or TransformerLens (a refusal took 7-11 s, almost all imports).
    Anything else (hub names, GGUF files, unreadable configs) is left to load_probe_model."""
    folder = Path(source)
    if not (folder / CONFIG).is_file():
        return
    try:
        model_type = read_config_json(folder).get("model_type")
    except UserError:
        return
    adapter_for(model_type)
