"""Parameter and training-FLOP accounting for tapered and uniform configs, by formula (no allocation).

Parameters: embeddings V·d (+ T_max·d learned positions), per block a token mixer (its row's formulas,
models/mixer_registry.py),
MLP 3·d·d_l (SwiGLU) or 2·d·d_l (GELU) per level (Hope-attention's continuum memory has K levels of width
d_l, others one; plus one step size per level that updates in context and one norm per level after the
first), two norms (d for RMSNorm, 2d for LayerNorm), a final norm, and the unembedding V·d
unless tied. Mixers: attention d·(H_l + 2·H_kv,l)·d_h + H_l·d_h·d (+ d·H_l·d_h for the G1 gate), with layer
l's heads H_l = cfg.heads_at(l), H_kv,l = cfg.kv_heads_at(l); Titans adds to a sliding-window attention (of
H_l heads) its memory layer (of H = n_heads heads in every layer): q/k/v 3·d·H·d_h, depthwise conv
3·H·d_h·k, rates 3·d·H + 3·H, memory initial weights 2·H·d_m·d_h, read-out norm d_h, gate d·H·d_h,
output H·d_h·d, persistent tokens P·d, and the SWA layer's pre-norm.
Training FLOPs per token (Kaplan et al. 2020): 6·N_matmul + 6·T_att·Σ_l H_l·d_h (+ Titans' inner loop), where
N_matmul counts every weight used in a multiply per token (blocks and unembedding; not the embedding
lookups or norms), T_att is the context the attention sees (min(T, window) + P persistent tokens for
Titans), and Titans' memory costs 6·H·(11·d_m·d_h + 2·b·(d_m + d_h)) per token per layer: the
multiply-accumulates of the
chunk-parallel algorithm as implemented (models/memory.py: key forward and error backprop at the chunk's
start 3·d_m·d_h, query read-out against W_0 and S_0 4·d_m·d_h, end-of-chunk weight and momentum updates
4·d_m·d_h, the two b-wide dual-form products 2·b·(d_m + d_h)), times 3 for forward + backward; Hope's
in-context levels add 6·(M + 1)·d·d_l per adaptive level (inner_flops_per_token).
KV-cache bytes per token: Σ_l 2·H_kv,l·d_h·bytes (a key and a value vector per key/value head per layer).
Every count is linear in d_l, H_l and H_kv,l, so a schedule that keeps Σ d_l, Σ H_l and Σ H_kv,l keeps
parameters, FLOPs and KV-cache bytes exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.mixer_registry import MIXERS
from tlm_probe.models.mixer_spec import NORM_PARAMS, mlp_matrices


@dataclass(frozen=True)
class LayerParams:
    layer: int
    d_ff: int
    attention: int
    mlp: int
    norms: int

    @property
    def total(self) -> int:
        return self.attention + self.mlp + self.norms


@dataclass(frozen=True)
class ParamCount:
    embedding: int
    positions: int
    layers: tuple[LayerParams, ...]
    final_norm: int
    unembedding: int

    @property
    def blocks(self) -> int:
        return sum(l.total for l in self.layers)

    @property
    def mlp(self) -> int:
        return sum(l.mlp for l in self.layers)

    @property
    def total(self) -> int:
        return self.embedding + self.positions + self.blocks + self.final_norm + self.unembedding

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding - self.positions - self.unembedding


def mixer_params(cfg: TLMConfig, layer: int = 0) -> int:
    """Parameters of block `layer`'s token mixer (named `attention` in the tables for every mixer)."""
    return MIXERS[cfg.mixer].params(cfg, layer)


def adaptive_levels(cfg: TLMConfig) -> int:
    """MLP levels per block that update in context (Hope-attention's continuum memory: chunk <
    max_seq_len); each carries one step-size parameter (models/cms.py). 0 for other mixers."""
    return MIXERS[cfg.mixer].adaptive_levels(cfg)


def count_params(cfg: TLMConfig) -> ParamCount:
    d = cfg.d_model
    norm = NORM_PARAMS[cfg.norm] * d
    per_width = cfg.mlp_levels * mlp_matrices(cfg) * d
    rates = adaptive_levels(cfg)
    norms = (1 + cfg.mlp_levels) * norm  # ln1, ln2 (level 1's for Hope), Hope's levels 2..K
    layers = tuple(LayerParams(l, w, mixer_params(cfg, l), per_width * w + rates, norms)
                   for l, w in enumerate(cfg.d_ff))
    return ParamCount(
        embedding=cfg.vocab_size * d,
        positions=cfg.max_seq_len * d if cfg.positions == "learned" else 0,
        layers=layers,
        final_norm=norm,
        unembedding=0 if cfg.tie_embeddings else cfg.vocab_size * d,
    )


def matmul_params(cfg: TLMConfig) -> int:
    pc, row = count_params(cfg), MIXERS[cfg.mixer]
    static = sum(row.static_params(cfg, l) + adaptive_levels(cfg) for l in range(cfg.n_layers))
    return sum(l.attention + l.mlp for l in pc.layers) - static + cfg.vocab_size * cfg.d_model


def inner_flops_per_token(cfg: TLMConfig) -> int:
    """Training FLOPs per token of the mixer's in-context updates, summed over layers: Titans' memory, Hope's
    adaptive continuum-memory levels (the row's inner_flops; 0 for attention)."""
    return MIXERS[cfg.mixer].inner_flops(cfg)


def train_flops_per_token(cfg: TLMConfig, seq_len: int | None = None) -> int:
    T_att = MIXERS[cfg.mixer].attention_context(cfg, seq_len or cfg.max_seq_len)
    attention = 6 * T_att * sum(cfg.heads_at(l) for l in range(cfg.n_layers)) * cfg.d_head
    return 6 * matmul_params(cfg) + attention + inner_flops_per_token(cfg)


KV_BYTES = 2
"""Bytes per cached key/value element in kv_cache_bytes_per_token (bf16/fp16 inference)."""


def kv_cache_bytes_per_token(cfg: TLMConfig, bytes_per_value: int = KV_BYTES) -> int:
    """Bytes one token adds to a KV cache: Σ_l 2·kv_heads_at(l)·d_head·bytes (keys and values of every
    layer's softmax attention; Titans' SWA would keep only its last `window` tokens of them)."""
    return sum(2 * cfg.kv_heads_at(l) * cfg.d_head * bytes_per_value for l in range(cfg.n_layers))


def comparison(tapered: TLMConfig, uniform: TLMConfig, seq_len: int | None = None) -> dict:
    """Side-by-side totals; `parity` is True when parameters, FLOPs and KV-cache bytes match exactly."""
    a, b = count_params(tapered), count_params(uniform)
    fa, fb = train_flops_per_token(tapered, seq_len), train_flops_per_token(uniform, seq_len)
    ka, kb = kv_cache_bytes_per_token(tapered), kv_cache_bytes_per_token(uniform)
    return {
        "params": a.total,
        "uniform_params": b.total,
        "flops_per_token": fa,
        "uniform_flops_per_token": fb,
        "kv_bytes_per_token": ka,
        "uniform_kv_bytes_per_token": kb,
        "parity": a.total == b.total and fa == fb and ka == kb,
    }
