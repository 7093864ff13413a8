"""karpathy's llama2.c checkpoints (`model.bin`, the legacy "version 0" export that run.c reads) as numpy
arrays, and those arrays as a Hugging Face LlamaForCausalLM state dict.

File layout: 7 little-endian int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
a negative vocab_size means the classifier is stored apart from the embedding), then float32 tensors in
this order: token embedding, every layer's attention RMSNorm, wq, wk, wv, wo, every layer's MLP RMSNorm,
w1, w2, w3, the final RMSNorm, two unused RoPE tables (seq_len x head_size/2 each), and the classifier
when it is unshared. Each matrix is a torch nn.Linear weight, (out, in), row-major.

RoPE: llama2.c rotates adjacent pairs (2i, 2i+1) of each head; Hugging Face's Llama rotates (i, i + hd/2)
("rotate_half"). Both use the frequency 10000^(-2i/hd) for pair i, so permuting the rows of wq and wk head
by head (pair i's two rows moved to positions i and i + hd/2) gives the same attention scores: q·k is a
sum over the same pairs, only their storage order changes (the permutation of Meta's convert script).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tlm_probe.errors import UserError

HEADER = np.dtype("<i4")
FLOAT = np.dtype("<f4")
_FIELDS = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len")
VERSIONED_MAGIC = 0x616B3432  # "ak42": llama2.c's newer export versions 1 and 2 (a 256-byte header)
NORM_EPS = 1e-5  # run.c's rmsnorm
ROPE_THETA = 10000.0  # run.c's frequency base
MAX_SIDE = 1 << 20  # a header field beyond this is not a llama2.c model


@dataclass(frozen=True)
class Llama2cConfig:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    seq_len: int
    shared_classifier: bool

    @property
    def head_size(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_size

    def shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        """(name, shape) of every stored tensor, in file order."""
        L, d, h, kv, V = self.n_layers, self.dim, self.hidden_dim, self.kv_dim, self.vocab_size
        rope = (self.seq_len, self.head_size // 2)
        out = [("tok_embeddings", (V, d)), ("rms_att", (L, d)), ("wq", (L, d, d)), ("wk", (L, kv, d)),
               ("wv", (L, kv, d)), ("wo", (L, d, d)), ("rms_ffn", (L, d)), ("w1", (L, h, d)),
               ("w2", (L, d, h)), ("w3", (L, h, d)), ("rms_final", (d,)), ("freq_cis_real", rope),
               ("freq_cis_imag", rope)]
        return out + ([] if self.shared_classifier else [("wcls", (V, d))])

    def n_floats(self) -> int:
        return sum(int(np.prod(s)) for _, s in self.shapes())


def read_config(path: Path) -> Llama2cConfig:
    """The header of a llama2.c file, checked against the file's size before anything else is read."""
    size = path.stat().st_size
    if size < 28:
        raise UserError(f"{path} is too short to be a llama2.c checkpoint ({size} bytes)")
    with path.open("rb") as f:
        head = np.frombuffer(f.read(28), HEADER)
    if int(head[0]) == VERSIONED_MAGIC:
        raise UserError(f"{path} is a versioned llama2.c export (magic ak42); only the legacy format that "
                        "run.c reads is supported (export.py --version 0)")
    values = dict(zip(_FIELDS, (int(v) for v in head), strict=True))
    shared = values["vocab_size"] > 0
    values["vocab_size"] = abs(values["vocab_size"])
    bad = [k for k, v in values.items() if not 0 < v <= MAX_SIDE]
    if bad or values["dim"] % values["n_heads"] or values["n_heads"] % values["n_kv_heads"] \
            or (values["dim"] // values["n_heads"]) % 2:
        raise UserError(f"{path} is not a llama2.c checkpoint: header {list(head)} is not a model's shape")
    cfg = Llama2cConfig(**values, shared_classifier=shared)
    want = 28 + 4 * cfg.n_floats()
    if size != want:
        raise UserError(f"{path}: header {list(head)} needs {want:,} bytes, the file has {size:,} "
                        "(truncated, or not a legacy llama2.c export)")
    return cfg


def read_weights(path: Path) -> tuple[Llama2cConfig, dict[str, np.ndarray]]:
    """(config, {name: float32 array}) of a llama2.c checkpoint; the classifier is the embedding when
    shared."""
    cfg = read_config(path)
    flat = np.fromfile(path, dtype=FLOAT, offset=28)
    tensors, at = {}, 0
    for name, shape in cfg.shapes():
        n = int(np.prod(shape))
        tensors[name] = flat[at:at + n].reshape(shape)
        at += n
    tensors.setdefault("wcls", tensors["tok_embeddings"])
    if not all(np.isfinite(t).all() for t in tensors.values()):
        raise UserError(f"{path} holds non-finite weights")
    return cfg, tensors


def rotate_half_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Rows of a q or k projection from llama2.c's adjacent-pair RoPE layout to rotate_half's: in each head,
    row 2i goes to i and row 2i+1 to i + head_size/2."""
    out_dim, in_dim = w.shape
    hd = out_dim // n_heads
    return w.reshape(n_heads, hd // 2, 2, in_dim).transpose(0, 2, 1, 3).reshape(out_dim, in_dim)


LAYER_MAP = {  # llama2.c tensor -> (LlamaForCausalLM name under model.layers.N., whose heads to permute by)
    "rms_att": ("input_layernorm.weight", None),
    "wq": ("self_attn.q_proj.weight", "n_heads"),
    "wk": ("self_attn.k_proj.weight", "n_kv_heads"),
    "wv": ("self_attn.v_proj.weight", None),
    "wo": ("self_attn.o_proj.weight", None),
    "rms_ffn": ("post_attention_layernorm.weight", None),
    "w1": ("mlp.gate_proj.weight", None),
    "w3": ("mlp.up_proj.weight", None),
    "w2": ("mlp.down_proj.weight", None),
}


def hf_state(cfg: Llama2cConfig, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The LlamaForCausalLM state dict (float32, contiguous); lm_head only when the classifier is unshared."""
    state = {"model.embed_tokens.weight": tensors["tok_embeddings"],
             "model.norm.weight": tensors["rms_final"]}
    for l in range(cfg.n_layers):
        for src, (dst, heads) in LAYER_MAP.items():
            w = tensors[src][l]
            state[f"model.layers.{l}.{dst}"] = rotate_half_rows(w, getattr(cfg, heads)) if heads else w
    if not cfg.shared_classifier:
        state["lm_head.weight"] = tensors["wcls"]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in state.items()}


def hf_config(cfg: Llama2cConfig) -> dict:
    """config.json of the equivalent LlamaForCausalLM (run.c: RMSNorm eps 1e-5, RoPE base 10000, SwiGLU)."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.dim, "intermediate_size": cfg.hidden_dim, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_size, "hidden_act": "silu", "max_position_embeddings": cfg.seq_len,
        "rms_norm_eps": NORM_EPS, "rope_theta": ROPE_THETA,
        "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA},
        "tie_word_embeddings": cfg.shared_classifier, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
    }
