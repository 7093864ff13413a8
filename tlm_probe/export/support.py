"""What a stock Llama-style format can hold of a tlm model: the refusals (one line each) and the per-layer
widths (MLP width, query heads, KV heads) an export must carry."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tlm_probe.errors import UserError
from tlm_probe.models.config import TLMConfig

# config field -> (the value a Llama block has, why another value has no stock equivalent)
_REQUIRED = {
    "mixer": ("attention", "its token mixer is {v!r}; Llama-style formats hold plain softmax attention only "
                           "(no output gate, neural memory or continuum memory)"),
    "mlp": ("swiglu", "its MLP is {v!r}; a Llama MLP is SwiGLU"),
    "norm": ("rmsnorm", "its norm is {v!r}; Llama uses RMSNorm"),
    "positions": ("rope", "its positions are {v!r}; Llama uses rotary embeddings"),
    "norm_scaling": ("none", "its pre-norms are depth-scaled (norm_scaling {v!r}, LayerNorm Scaling); "
                             "Llama's are not"),
}


def layer_heads(cfg: TLMConfig) -> tuple[int, ...]:
    """Query heads of each layer, as the model reads them."""
    return tuple(cfg.heads_at(i) for i in range(cfg.n_layers))


def layer_kv_heads(cfg: TLMConfig) -> tuple[int, ...]:
    """Key/value heads of each layer, as the model reads them."""
    return tuple(cfg.kv_heads_at(i) for i in range(cfg.n_layers))


@dataclass(frozen=True)
class LayerShapes:
    """The per-layer integers a heterogeneous Llama-style format records (head dimension fixed)."""

    d_ff: tuple[int, ...]
    heads: tuple[int, ...]
    kv_heads: tuple[int, ...]
    d_head: int

    @property
    def uniform(self) -> bool:
        return all(len(set(v)) == 1 for v in (self.d_ff, self.heads, self.kv_heads))

    def per_layer(self) -> dict[str, tuple[int, ...]]:
        return {"d_ff": self.d_ff, "heads": self.heads, "kv_heads": self.kv_heads}


def check_exportable(cfg: TLMConfig, target: str) -> LayerShapes:
    """The model's per-layer shapes, or one UserError line saying why `target` cannot hold it."""
    for key, (want, why) in _REQUIRED.items():
        if getattr(cfg, key) != want:
            raise UserError(f"cannot export to {target}: {why.format(v=getattr(cfg, key))}")
    shapes = LayerShapes(tuple(cfg.d_ff), layer_heads(cfg), layer_kv_heads(cfg), cfg.d_head)
    # a block without MLP or attention: Llama has both in every block, and llama.cpp's deci (the arch
    # that reads per-layer widths) runs an n_ff = 0 block wrong: its `continue` drops the block's
    # attention output too (src/models/deci.cpp), where our d_l = 0 block keeps it
    for what, values in (("MLP (d_l = 0)", shapes.d_ff), ("attention (0 heads)", shapes.heads),
                         ("keys/values (0 KV heads)", shapes.kv_heads)):
        if 0 in values:
            raise UserError(f"cannot export to {target}: block {values.index(0)} has no {what}; every block "
                            "of a Llama-style model has attention and an MLP")
    return shapes


def check_state_shapes(state: dict, shapes: LayerShapes, d_model: int) -> None:
    """The weights have the shapes the per-layer integers imply (a config/weights mismatch would otherwise
    write a file whose metadata contradicts its tensors)."""
    for l in range(len(shapes.d_ff)):
        p = f"blocks.{l}."
        want = {"attn.W_Q.weight": (shapes.heads[l] * shapes.d_head, d_model),
                "attn.W_K.weight": (shapes.kv_heads[l] * shapes.d_head, d_model),
                "attn.W_V.weight": (shapes.kv_heads[l] * shapes.d_head, d_model),
                "attn.W_O.weight": (d_model, shapes.heads[l] * shapes.d_head),
                "mlp.W_gate.weight": (shapes.d_ff[l], d_model), "mlp.W_in.weight": (shapes.d_ff[l], d_model),
                "mlp.W_out.weight": (d_model, shapes.d_ff[l])}
        for name, shape in want.items():
            got = tuple(state[p + name].shape) if p + name in state else None
            if got != shape:
                raise UserError(f"cannot export: {p + name} has shape {got}, the config implies {shape}")


def rope_interleave(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Rows of a Q or K projection from the rotate-half rotary layout (ours and Hugging Face's: a head's
    rotary pairs are (i, i + d/2)) to llama.cpp's "normal" RoPE layout (pairs (2i, 2i + 1)); the permute
    of llama.cpp's convert_hf_to_gguf.py. n_heads: the heads the matrix holds (KV heads for K)."""
    rows = w.shape[0]
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
