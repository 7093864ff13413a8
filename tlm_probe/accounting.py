"""Parameter and training-FLOP accounting for tapered and uniform configs, by formula (no allocation).

Parameters: embeddings V·d (+ T_max·d learned positions), per block attention d·(H + 2·H_kv)·d_h + H·d_h·d
(+ d·H·d_h for the G1 gate), MLP 3·d·d_l (SwiGLU) or 2·d·d_l (GELU), two norms (d for RMSNorm, 2d for
LayerNorm), a final norm, and the unembedding V·d unless tied.
Training FLOPs per token (Kaplan et al. 2020): 6·N_matmul + 6·L·T·H·d_h, where N_matmul counts every
weight used in a matrix multiply (blocks and unembedding; not the embedding lookups or norms) and the
second term is the attention score/value products at context T.
"""

from __future__ import annotations

from dataclasses import dataclass

from tlm_probe.models.config import TLMConfig

MLP_MATRICES = {"swiglu": 3, "gelu": 2}
NORM_PARAMS = {"rmsnorm": 1, "layernorm": 2}


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


def attention_params(cfg: TLMConfig) -> int:
    d, dh = cfg.d_model, cfg.d_head
    n = d * (cfg.n_heads + 2 * cfg.kv_heads) * dh + cfg.n_heads * dh * d
    return n + (d * cfg.n_heads * dh if cfg.mixer == "gated_attention" else 0)


def count_params(cfg: TLMConfig) -> ParamCount:
    d = cfg.d_model
    norm = NORM_PARAMS[cfg.norm] * d
    attn = attention_params(cfg)
    layers = tuple(
        LayerParams(l, w, attn, MLP_MATRICES[cfg.mlp] * d * w, 2 * norm) for l, w in enumerate(cfg.d_ff)
    )
    return ParamCount(
        embedding=cfg.vocab_size * d,
        positions=cfg.max_seq_len * d if cfg.positions == "learned" else 0,
        layers=layers,
        final_norm=norm,
        unembedding=0 if cfg.tie_embeddings else cfg.vocab_size * d,
    )


def matmul_params(cfg: TLMConfig) -> int:
    pc = count_params(cfg)
    return sum(l.attention + l.mlp for l in pc.layers) + cfg.vocab_size * cfg.d_model


def train_flops_per_token(cfg: TLMConfig, seq_len: int | None = None) -> int:
    T = seq_len or cfg.max_seq_len
    return 6 * matmul_params(cfg) + 6 * cfg.n_layers * T * cfg.n_heads * cfg.d_head


def comparison(tapered: TLMConfig, uniform: TLMConfig, seq_len: int | None = None) -> dict:
    """Side-by-side totals; `parity` is True when parameters and FLOPs match exactly."""
    a, b = count_params(tapered), count_params(uniform)
    fa, fb = train_flops_per_token(tapered, seq_len), train_flops_per_token(uniform, seq_len)
    return {
        "params": a.total,
        "uniform_params": b.total,
        "flops_per_token": fa,
        "uniform_flops_per_token": fb,
        "parity": a.total == b.total and fa == fb,
    }
