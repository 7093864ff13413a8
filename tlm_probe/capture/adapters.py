"""The table of architecture adapters: where each model family keeps its layers and sublayers.

All architecture knowledge lives in ADAPTERS (module paths, block kind, how the model is called, position
offsets, how TransformerLens wraps it); nothing else in the package branches on a family or model type.
A *tap* is "path:in" or "path:out": the first input or the (first) output of the module at `path`,
relative to one layer ("" is the layer itself). Each row gives, per block kind, the taps that produce the
contract's pieces (DESIGN.md section 2):

    resid_pre, attn_out, resid_mid, mlp_out, resid_post   the residual stream and the sublayer outputs
    mlp_post                                              neuron activity (input of the down projection)
    attn_sum, resid_post_prenorm                          post-LN only: the sums before each LayerNorm

Block kinds: "sequential" pre-LN (resid_mid = resid_pre + attn_out, resid_post = resid_mid + mlp_out),
"parallel" (attention and MLP both read resid_pre; resid_post = resid_pre + attn_out + mlp_out; there is no
resid_mid tap: the probe uses resid_pre + attn_out, the stream the MLP output is added to), and "post_ln"
(BERT: resid_mid is LayerNorm(resid_pre + attn_out), resid_post is LayerNorm(resid_mid + mlp_out)).

To add a family: add one Adapter row below with its Hugging Face `model_type` values and taps; the
guardrails (every tap fires, the pieces add up) tell you at once if a path is wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tlm_probe.errors import UserError

SEQUENTIAL, PARALLEL, POST_LN = "sequential", "parallel", "post_ln"
BLOCK_KINDS = (SEQUENTIAL, PARALLEL, POST_LN)
PIECES = ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post", "mlp_post")


@dataclass(frozen=True)
class Adapter:
    """One model family: module paths (relative to the base model / to one layer) and its block kind."""

    family: str
    """Name shown to users (and recorded in provenance)."""
    model_types: tuple[str, ...]
    """Hugging Face `config.model_type` values served by this row."""
    layers: str
    """Path of the ModuleList of blocks, relative to the base model (`model.base_model`)."""
    mlp: str
    """MLP module, relative to a layer (its parameters are the gradient-importance group; for OPT, which
    has no MLP module, the second linear)."""
    mlp_down: str
    """MLP down projection (nn.Linear or Conv1D); its input is the neuron activity, its in-width is d_l."""
    final_norm: str | None
    """Final norm, relative to the base model (None for post-LN encoders)."""
    lm_head: str | None
    """Unembedding, relative to the top-level model (None for encoders)."""
    taps: Mapping[str, Mapping[str, str]]
    """block kind -> piece -> tap."""
    kind_of: Callable[[Any], str]
    """config -> block kind (a family may have several, e.g. GPT-NeoX with use_parallel_residual)."""
    is_causal: bool = True
    inputs: str = "keywords"
    """How the model is called: "keywords" (transformers: input_ids=, attention_mask=, use_cache=False)
    or "positional" (our TaperedLM: input_ids, attention_mask=)."""
    position_offset: int = 0
    """Position ids reserved before the first token (RoBERTa starts after the padding index: 2)."""
    tl_native: bool = False
    """The model carries TransformerLens HookPoints itself: the TL backend runs it as is, no bridge."""
    tl_architecture: str | None = None
    """TransformerLens bridge architecture when it is not the model's own class (encoders load as bare
    models; the bridge wants the masked-LM class around them, whose head the probe never uses)."""
    notes: str = field(default="", compare=False)

    def block_kind(self, config: Any) -> str:
        kind = self.kind_of(config)
        if kind not in self.taps:
            raise UserError(
                f"{self.family} models with this configuration ({kind} blocks) are not supported "
                f"by the adapter table (supported block kinds here: {', '.join(self.taps)})"
            )
        return kind


def _fixed(kind: str) -> Callable[[Any], str]:
    return lambda config: kind


def _seq_taps(ln2: str, attn: str, mlp: str, down: str) -> dict[str, str]:
    return {
        "resid_pre": ":in",
        "attn_out": f"{attn}:out",
        "resid_mid": f"{ln2}:in",
        "mlp_out": f"{mlp}:out",
        "resid_post": ":out",
        "mlp_post": f"{down}:in",
    }


def _par_taps(attn: str, mlp: str, down: str) -> dict[str, str]:
    return {
        "resid_pre": ":in",
        "attn_out": f"{attn}:out",
        "mlp_out": f"{mlp}:out",
        "resid_post": ":out",
        "mlp_post": f"{down}:in",
    }


_BERT_TAPS = {
    "resid_pre": ":in",
    "attn_out": "attention.output.dense:out",
    "resid_mid": "attention:out",
    "mlp_out": "output.dense:out",
    "resid_post": ":out",
    "mlp_post": "output.dense:in",
    "attn_sum": "attention.output.LayerNorm:in",
    "resid_post_prenorm": "output.LayerNorm:in",
}

_TLM_TAPS = {
    "resid_pre": "hook_resid_pre:out",
    "attn_out": "hook_attn_out:out",
    "resid_mid": "hook_resid_mid:out",
    "mlp_out": "hook_mlp_out:out",
    "resid_post": "hook_resid_post:out",
    "mlp_post": "mlp.hook_post:out",
}

_LLAMA = dict(
    layers="layers",
    mlp="mlp",
    mlp_down="mlp.down_proj",
    final_norm="norm",
    lm_head="lm_head",
    taps={SEQUENTIAL: _seq_taps("post_attention_layernorm", "self_attn", "mlp", "mlp.down_proj")},
    kind_of=_fixed(SEQUENTIAL),
)

_BERT = dict(
    layers="encoder.layer",
    mlp="output",
    mlp_down="output.dense",
    final_norm=None,
    lm_head=None,
    taps={POST_LN: _BERT_TAPS},
    kind_of=_fixed(POST_LN),
    is_causal=False,
    notes="post-LN encoder: mlp_out is output.dense (before the residual add and LayerNorm)",
)

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
        kind_of=_fixed(SEQUENTIAL),
        inputs="positional",
        tl_native=True,
        notes="our tapered model; taps are its contract HookPoints",
    ),
    Adapter(
        "gpt2",
        ("gpt2",),
        layers="h",
        mlp="mlp",
        mlp_down="mlp.c_proj",
        final_norm="ln_f",
        lm_head="lm_head",
        taps={SEQUENTIAL: _seq_taps("ln_2", "attn", "mlp", "mlp.c_proj")},
        kind_of=_fixed(SEQUENTIAL),
    ),
    Adapter("llama", ("llama", "mistral", "qwen2", "qwen3", "gemma", "olmo"), **_LLAMA),
    Adapter(
        "gpt_neox",
        ("gpt_neox",),
        layers="layers",
        mlp="mlp",
        mlp_down="mlp.dense_4h_to_h",
        final_norm="final_layer_norm",
        lm_head="lm_head",
        taps={
            PARALLEL: _par_taps("attention", "mlp", "mlp.dense_4h_to_h"),
            SEQUENTIAL: _seq_taps("post_attention_layernorm", "attention", "mlp", "mlp.dense_4h_to_h"),
        },
        kind_of=lambda c: PARALLEL if getattr(c, "use_parallel_residual", True) else SEQUENTIAL,
    ),
    Adapter(
        "gptj",
        ("gptj",),
        layers="h",
        mlp="mlp",
        mlp_down="mlp.fc_out",
        final_norm="ln_f",
        lm_head="lm_head",
        taps={PARALLEL: _par_taps("attn", "mlp", "mlp.fc_out")},
        kind_of=_fixed(PARALLEL),
    ),
    Adapter(
        "opt",
        ("opt",),
        layers="decoder.layers",
        mlp="fc2",
        mlp_down="fc2",
        final_norm="decoder.final_layer_norm",
        lm_head="lm_head",
        taps={SEQUENTIAL: _seq_taps("final_layer_norm", "self_attn", "fc2", "fc2")},
        kind_of=lambda c: SEQUENTIAL if getattr(c, "do_layer_norm_before", True) else POST_LN,
        notes="OPT-350m (do_layer_norm_before=False) is post-LN and not mapped yet",
    ),
    Adapter("bert", ("bert", "electra"), **_BERT, tl_architecture="BertForMaskedLM"),
    Adapter(
        "roberta",
        ("roberta", "xlm-roberta", "camembert"),
        **_BERT,
        position_offset=2,
        tl_architecture="RobertaForMaskedLM",
    ),
)

_BY_TYPE = {t: a for a in ADAPTERS for t in a.model_types}


def adapter_for(model_type: str | None) -> Adapter:
    """The row serving `model_type`, or a UserError listing what is supported and how to add a row."""
    if model_type in _BY_TYPE:
        return _BY_TYPE[model_type]
    families = "; ".join(f"{a.family} ({', '.join(a.model_types)})" for a in ADAPTERS)
    raise UserError(
        f"unsupported architecture {model_type!r}. Supported families: {families}. To add one, add "
        "an Adapter row (layer path + taps) to ADAPTERS in tlm_probe/capture/adapters.py"
    )


def split_tap(tap: str) -> tuple[str, str]:
    """'mlp.c_proj:in' -> ('mlp.c_proj', 'in')."""
    path, _, where = tap.rpartition(":")
    return path, where
