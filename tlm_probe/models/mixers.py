"""Which token mixer and which MLP each `cfg.mixer` builds: the one table the block reads.

Every mixer is called as mixer(x, positions, mask, valid) -> (B, T, d_model) on x = ln1(resid_pre), and its
output is the block's `hook_attn_out`, whatever it computes inside (DESIGN.md section 2). A mixer or MLP with
`reads_stream = True` (a hybrid with residual connections inside, models/mixer_registry.py) is given the raw
residual stream and the block's norm, and returns its total increment to the stream.
"""

from __future__ import annotations

from torch import nn

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.mixer_registry import MIXERS
from tlm_probe.models.mixer_spec import MLPS, TrainingHooks
from tlm_probe.registry import import_entry


def make_mixer(cfg: TLMConfig, layer: int) -> nn.Module:
    """Layer `layer`'s mixer (its heads: cfg.heads_at(layer), cfg.kv_heads_at(layer)): its row's `module`."""
    return import_entry(MIXERS.get(cfg.mixer).module)(cfg, layer)


def make_mlp(cfg: TLMConfig, layer: int) -> nn.Module:
    """The row's `mlp_module` where it replaces the block's MLP, else cfg.mlp's MLP of width d_ff[layer]."""
    row = MIXERS.get(cfg.mixer)
    if row.mlp_module:
        return import_entry(row.mlp_module)(cfg, layer)
    return MLPS.get(cfg.mlp)(cfg.d_model, cfg.d_ff[layer])


def training_hooks(cfg: TLMConfig, model: nn.Module, fsdp: bool) -> TrainingHooks:
    """What the trainer calls on the mixer's behalf (its row's `training`)."""
    return import_entry(MIXERS.get(cfg.mixer).training)(model, fsdp)
