"""Which token mixer and which MLP each `cfg.mixer` builds: the one table the block reads.

Every mixer is called as mixer(x, positions, mask, valid) -> (B, T, d_model) and its output is the block's
`hook_attn_out`, whatever it computes inside (DESIGN.md section 2).
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

KV_CACHE_MIXERS = ("attention", "gated_attention", "hope_attention")
"""Mixers whose state over past tokens is their keys and values (generation may cache them); Titans'
memory is a recurrence over the whole prefix, so its generation recomputes the prefix each step."""


def make_mixer(cfg: TLMConfig) -> nn.Module:
    return MIXERS[cfg.mixer](cfg)


def make_mlp(cfg: TLMConfig, layer: int) -> nn.Module:
    if cfg.mixer == "hope_attention":
        return ContinuumMemory(cfg.mlp, cfg.d_model, cfg.d_ff[layer], cfg.cms_periods)
    return MLPS[cfg.mlp](cfg.d_model, cfg.d_ff[layer])
