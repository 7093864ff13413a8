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


MOE: tuple[Adapter, ...] = (
    _moe("mixtral", ("mixtral", "qwen3_moe", "olmoe", "gpt_oss")),
    _moe("qwen2_moe", ("qwen2_moe",), shared=("mlp.shared_expert",)),
    _moe("deepseek_v3", ("deepseek_v3",), shared=("mlp.shared_experts",)),
)
