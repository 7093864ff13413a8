"""The tensors a TLMConfig implies (state-dict name -> shape), by formula: no torch, no model code.

`tlm info` checks a checkpoint's safetensors header against these before anything imports torch, and every
loader checks them before it allocates a model (a config.json with vocab_size 10**10 is refused, not
allocated). tests/test_loader_errors.py compares them with TaperedLM's own state_dict for every mixer,
MLP, norm and position kind, so the model code and this table cannot drift apart.
"""

from __future__ import annotations

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.mixer_registry import MIXERS
from tlm_probe.models.mixer_spec import Shapes, norm_shapes

TIED = ("embed.weight", "unembed.weight")
"""With tie_embeddings one tensor has both names; a file may store it under either (or both)."""


def _block(cfg: TLMConfig, l: int) -> Shapes:
    """ln1, the token mixer, ln2 and the MLP, each as the mixer's row says (models/mixer_registry.py)."""
    p, row = f"blocks.{l}", MIXERS[cfg.mixer]
    return {**norm_shapes(cfg, f"{p}.ln1"), **row.shapes(cfg, f"{p}.attn", l), **norm_shapes(cfg, f"{p}.ln2"),
            **row.mlp_shapes(cfg, f"{p}.mlp", l)}


def state_shapes(cfg: TLMConfig) -> Shapes:
    """Every state-dict entry of TaperedLM(cfg) with its shape (both names of tied embeddings)."""
    V, d = cfg.vocab_size, cfg.d_model
    out: Shapes = {"embed.weight": (V, d)}
    if cfg.positions == "learned":
        out["pos_embed.weight"] = (cfg.max_seq_len, d)
    for l in range(cfg.n_layers):
        out.update(_block(cfg, l))
    return {**out, **norm_shapes(cfg, "ln_final.norm"), "unembed.weight": (V, d)}


def required_groups(cfg: TLMConfig) -> list[tuple[str, ...]]:
    """Names a weights file must hold: one of each group (a tied tensor is stored under one name)."""
    tied = set(TIED) if cfg.tie_embeddings else set()
    return [(n,) for n in state_shapes(cfg) if n not in tied] + ([TIED] if tied else [])
