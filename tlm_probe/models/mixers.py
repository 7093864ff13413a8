"""Which token mixer and which MLP each `cfg.mixer` builds: the one table the block reads.

Every mixer is called as mixer(x, positions, mask, valid) -> (B, T, d_model) on x = ln1(resid_pre), and its
output is the block's `hook_attn_out`, whatever it computes inside (DESIGN.md section 2). A mixer or MLP with
`reads_stream = True` (Titans' MAL hybrid, Hope's CMS) has residual connections inside: it is given the raw
residual stream and the block's norm, and returns its total increment to the stream.
"""

from __future__ import annotations

import importlib

from torch import nn

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.mixer_registry import MIXERS as ROWS
from tlm_probe.models.mlp import MLPS


def _load(path: str) -> type:
    """The class at "package.module:Class" (a row names its module: the registry imports no torch)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


MIXERS = {name: _load(row.module) for name, row in ROWS.items()}
"""cfg.mixer -> its token mixer's class (models/mixer_registry.py: the row's `module`)."""
MLP_MODULES = {name: _load(row.mlp_module) for name, row in ROWS.items() if row.mlp_module}
"""cfg.mixer -> the class that replaces the block's MLP (Hope's continuum memory); others use cfg.mlp's."""

KV_CACHE_MIXERS = tuple(name for name, row in ROWS.items() if row.kv_cache)
"""Mixers whose state over past tokens is their keys and values (generation may cache them); Titans'
memory and Hope-attention's in-context CMS levels are recurrences over the whole prefix, so their
generation recomputes the prefix each step."""


def make_mixer(cfg: TLMConfig, layer: int) -> nn.Module:
    """Layer `layer`'s mixer (its heads: cfg.heads_at(layer), cfg.kv_heads_at(layer))."""
    return MIXERS[cfg.mixer](cfg, layer)


def make_mlp(cfg: TLMConfig, layer: int) -> nn.Module:
    if cfg.mixer in MLP_MODULES:
        return MLP_MODULES[cfg.mixer](cfg, layer)
    return MLPS[cfg.mlp](cfg.d_model, cfg.d_ff[layer])
