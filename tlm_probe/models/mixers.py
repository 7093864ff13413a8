"""Which token mixer and which MLP each `cfg.mixer` builds: the one table the block reads.

Every mixer is called as mixer(x, positions, mask, valid) -> (B, T, d_model) on x = ln1(resid_pre), and its
output is the block's `hook_attn_out`, whatever it computes inside (DESIGN.md section 2). A mixer or MLP with
`reads_stream = True` (Titans' MAL hybrid, Hope's CMS) has residual connections inside: it is given the raw
residual stream and the block's norm, and returns its total increment to the stream.
"""

from __future__ import annotations

from torch import nn

from tlm_probe.models.attention import Attention
from tlm_probe.models.cms import ContinuumMemory
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.mlp import MLPS
from tlm_probe.models.titans import Titans

MIXERS = {
    "attention": Attention,
    "gated_attention": Attention,  # Attention reads cfg.mixer and adds the G1 gate
    "titans": Titans,
    "hope_attention": Attention,  # softmax attention; the CMS replaces the MLP (below)
}

KV_CACHE_MIXERS = ("attention", "gated_attention")
"""Mixers whose state over past tokens is their keys and values (generation may cache them); Titans'
memory and Hope-attention's in-context CMS levels are recurrences over the whole prefix, so their
generation recomputes the prefix each step."""


def make_mixer(cfg: TLMConfig, layer: int) -> nn.Module:
    """Layer `layer`'s mixer (its heads: cfg.heads_at(layer), cfg.kv_heads_at(layer))."""
    return MIXERS[cfg.mixer](cfg, layer)


def make_mlp(cfg: TLMConfig, layer: int) -> nn.Module:
    if cfg.mixer == "hope_attention":
        return ContinuumMemory(cfg, layer)
    return MLPS[cfg.mlp](cfg.d_model, cfg.d_ff[layer])
