"""What one row of the adapter table (adapters.py) holds, and the helpers that spell common tap layouts.

A *tap* is "path:in" or "path:out": the first input or the (first) output of the module at `path`,
relative to one layer ("" is the layer itself). Each row gives, per block kind, the taps that produce the
contract's pieces (DESIGN.md section 2):

    resid_pre, attn_out, resid_mid, mlp_out, resid_post   the residual stream and the sublayer outputs
    mlp_post                                              neuron activity (input of the down projection)
    attn_sum, resid_post_prenorm                          post-LN only: the sums before each LayerNorm

`attn_out` and `mlp_out` are by contract the tensors the block adds to the residual stream: after a
sublayer's own output norm (Gemma 2's post_feedforward_layernorm), times a residual multiplier (Granite),
before any residual the module adds itself (BLOOM adds it inside its MLP: the tap is the down projection).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tlm_probe.errors import UserError

SEQUENTIAL, PARALLEL, POST_LN, MIXER_ONLY = "sequential", "parallel", "post_ln", "mixer_only"
SEQUENTIAL_CROSS = "sequential_cross"
BLOCK_KINDS = (SEQUENTIAL, PARALLEL, POST_LN, MIXER_ONLY, SEQUENTIAL_CROSS)
"""mixer_only: a block with a token mixer and no MLP (Mamba): resid_post = resid_pre + attn_out, where
attn_out is the mixer's output. sequential_cross: a pre-norm decoder block of an encoder-decoder (T5) with
self-attention, then cross-attention over the encoder's output, then the MLP: both attentions are captured
(self_attn_out, cross_attn_out) and attn_out is their sum, so resid_mid = resid_pre + attn_out is the
stream after both, the one the MLP output is added to."""
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
    mlp: str | None
    """MLP module relative to a layer, None for a block without one (its parameters are the gradient-
    importance group; for OPT, which has no MLP module, the second linear; for a mixture of experts the
    whole sparse block)."""
    mlp_down: str | None
    """MLP down projection (nn.Linear or Conv1D); its input is the neuron activity, its in-width is d_l.
    In a mixture-of-experts layer (see `experts`) there is none: d_l is read from the fused experts."""
    final_norm: str | None
    """Final norm, relative to the base model (None for post-LN encoders)."""
    lm_head: str | None
    """Unembedding, relative to the top-level model (None for encoders)."""
    taps: Mapping[str, Mapping[str, str]]
    """block kind -> piece -> tap."""
    kind_of: Callable[[Any], str]
    """config -> block kind (a family may have several, e.g. GPT-NeoX with use_parallel_residual); raises
    UserError for a configuration no tap layout serves."""
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
    tl_refusal: Callable[[Any], str | None] | None = None
    """config -> why the TransformerLens backend cannot serve this model (no bridge, or a bridge that fails
    or computes something else), None where it can."""
    scale: Callable[[Any], Mapping[str, float]] | None = None
    """config -> piece -> factor the block multiplies that module output by before adding it (Granite's
    residual_multiplier): the piece is the product, what reaches the residual stream."""
    copy: frozenset[str] = frozenset()
    """Pieces the model changes in place after their tap fired (Falcon adds the attention output into the
    MLP output): captured as copies."""
    setup: Mapping[str, Any] = field(default_factory=dict)
    """Layer attribute -> value set on load: settings that change no number but would make a tap fire more
    than once per layer (BERT's chunk_size_feed_forward runs the MLP over chunks of positions)."""
    final_by_kind: Mapping[str, str | None] = field(default_factory=dict)
    """block kind -> final map before the head when it is not `final_norm` (OPT-350m: project_out)."""
    experts: str | None = None
    """Fused experts module, relative to a layer: a layer that has it is a mixture-of-experts layer."""
    shared_experts: tuple[str, ...] = ()
    """Shared (always active) expert MLPs of a mixture-of-experts layer, relative to a layer."""
    head_transform: Callable[[Any], str | None] | None = None
    """config -> what the model does to the head's output beyond the final norm + head (a logit scale or
    soft cap), None if nothing: the logit lens (final norm + head of an earlier layer) would not be the
    model's own readout, so lens statistics are refused with this reason."""
    importance_refusal: str | None = None
    """Why the importance statistics (the second pass) are not offered for this row, None where they are."""
    pattern: str | None = None
    """Where a layer's attention weights (B, H, T_q, T_k) come out, for attention statistics: "path:weights",
    the last element of the output of the attention module at `path` (transformers' modules return
    (output, ..., weights), the weights only under eager attention, which the probe then loads), or
    "path:out" for a hook whose output is the pattern (our blocks.{l}.attn.hook_pattern); None: the row's
    blocks have no softmax attention (or it is not mapped)."""
    pattern_refusal: Callable[[Any], str | None] | None = None
    """config -> why the weights at `pattern` are not a distribution over keys (attention sinks), None if
    they are."""
    model_class: Callable[[], Any] | None = None
    """() -> the transformers class a folder loads as, where not AutoModelForCausalLM / AutoModel (T5: its
    encoder stack alone, T5EncoderModel); a function, so that the table imports no transformers."""
    notes: str = field(default="", compare=False)
    """What the row's taps are, in words (docs/concepts/families.md, the docs' family table, is generated
    from it)."""
    origin: str = field(default="table", compare=False)
    """Where the row came from, for provenance: "table", or "discovered" (capture/discovery.py: inferred
    from the module tree and proved on the loaded model); user rows are told apart by registration."""

    def block_kind(self, config: Any) -> str:
        kind = self.kind_of(config)
        if kind not in self.taps:
            raise UserError(
                f"{self.family} models with this configuration ({kind} blocks) are not supported "
                f"by the adapter table (supported block kinds here: {', '.join(self.taps)})"
            )
        return kind

    def final_path(self, kind: str) -> str | None:
        return self.final_by_kind.get(kind, self.final_norm)


def fixed(value: str) -> Callable[[Any], str]:
    return lambda config: value


def refuse(family: str, why: str) -> str:
    """For kind_of: a configuration this row cannot map, as one clear line."""
    raise UserError(f"{family} models with this configuration are not supported: {why}")


def seq_taps(ln2: str, attn: str, mlp: str, down: str | None) -> dict[str, str]:
    """Pre-norm sequential block: resid_mid is the input of the MLP's norm."""
    taps = {
        "resid_pre": ":in",
        "attn_out": f"{attn}:out",
        "resid_mid": f"{ln2}:in",
        "mlp_out": f"{mlp}:out",
        "resid_post": ":out",
    }
    return taps | ({"mlp_post": f"{down}:in"} if down else {})


def par_taps(attn: str, mlp: str, down: str) -> dict[str, str]:
    return {
        "resid_pre": ":in",
        "attn_out": f"{attn}:out",
        "mlp_out": f"{mlp}:out",
        "resid_post": ":out",
        "mlp_post": f"{down}:in",
    }


def post_ln_taps(attn: str, ln1: str, mlp: str, ln2: str, down: str) -> dict[str, str]:
    """Post-LN block (BERT): each sublayer's output is added, then the sum is normalised."""
    return {
        "resid_pre": ":in",
        "attn_out": f"{attn}:out",
        "attn_sum": f"{ln1}:in",
        "resid_mid": f"{ln1}:out",
        "mlp_out": f"{mlp}:out",
        "resid_post_prenorm": f"{ln2}:in",
        "resid_post": ":out",
        "mlp_post": f"{down}:in",
    }


def split_tap(tap: str) -> tuple[str, str]:
    """'mlp.c_proj:in' -> ('mlp.c_proj', 'in')."""
    path, _, where = tap.rpartition(":")
    return path, where
