"""Mixture-of-experts rows (Llama-like layers whose MLP is a sparse block of routed and shared experts)."""

from __future__ import annotations

from tlm_probe.capture.families.llama import LLAMA_TAPS, llama_like
from tlm_probe.capture.rows import SEQUENTIAL, Adapter


def _moe(family: str, types: tuple[str, ...], shared: tuple[str, ...] = (), **kw) -> Adapter:
    """Mixture of experts: the MLP piece is the whole sparse block's output (router, experts, shared
    experts); no neuron tap, since routed experts have no one down projection per layer."""
    taps = {SEQUENTIAL: {k: v for k, v in LLAMA_TAPS.items() if k != "mlp_post"}}
    notes = "mixture of experts: mlp_out is the whole sparse block's output (routed + shared experts)"
    return llama_like(
        family, types, taps=taps, experts="mlp.experts", shared_experts=shared, notes=notes, **kw
    )


def _sinks(c) -> str | None:
    """GPT-OSS adds a learned sink logit per head to the softmax and drops its column: the weights over keys
    sum to less than 1, not a distribution whose entropy attn_entropy means."""
    if c.model_type != "gpt_oss":
        return None
    return "its attention has a learned sink logit per head: the weights over keys sum to less than 1"


MOE: tuple[Adapter, ...] = (
    _moe("mixtral", ("mixtral", "qwen3_moe", "olmoe", "gpt_oss"), pattern_refusal=_sinks),
    _moe("qwen2_moe", ("qwen2_moe",), shared=("mlp.shared_expert",)),
    _moe("deepseek_v3", ("deepseek_v3",), shared=("mlp.shared_experts",)),
)
