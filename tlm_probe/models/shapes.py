"""The tensors a TLMConfig implies (state-dict name -> shape), by formula: no torch, no model code.

`tlm info` checks a checkpoint's safetensors header against these before anything imports torch, and every
loader checks them before it allocates a model (a config.json with vocab_size 10**10 is refused, not
allocated). tests/test_loader_errors.py compares them with TaperedLM's own state_dict for every mixer,
MLP, norm and position kind, so the model code and this table cannot drift apart.
"""

from __future__ import annotations

from tlm_probe.models.config import TLMConfig

Shapes = dict[str, tuple[int, ...]]
TIED = ("embed.weight", "unembed.weight")
"""With tie_embeddings one tensor has both names; a file may store it under either (or both)."""


def _norm(cfg: TLMConfig, prefix: str) -> Shapes:
    d = (cfg.d_model,)
    return {f"{prefix}.weight": d, **({f"{prefix}.bias": d} if cfg.norm == "layernorm" else {})}


def _attention(cfg: TLMConfig, prefix: str, gated: bool, l: int) -> Shapes:
    d, q, kv = cfg.d_model, cfg.heads_at(l) * cfg.d_head, cfg.kv_heads_at(l) * cfg.d_head
    out = {f"{prefix}.W_Q.weight": (q, d), f"{prefix}.W_K.weight": (kv, d), f"{prefix}.W_V.weight": (kv, d),
           f"{prefix}.W_O.weight": (d, q)}
    return {**out, f"{prefix}.W_G.weight": (q, d)} if gated else out


def _titans(cfg: TLMConfig, prefix: str, l: int) -> Shapes:
    d, H, dh = cfg.d_model, cfg.n_heads, cfg.d_head
    d_m = cfg.mem_width_at(l)
    out = {
        f"{prefix}.W_QKV.weight": (3 * H * dh, d),
        f"{prefix}.conv.weight": (3 * H * dh, 1, cfg.conv_kernel),
        f"{prefix}.W_rates.weight": (3 * H, d),
        f"{prefix}.W_rates.bias": (3 * H,),
        f"{prefix}.mem_W1": (H, d_m, dh),
        f"{prefix}.mem_W2": (H, dh, d_m),
        f"{prefix}.mem_norm.weight": (dh,),
        f"{prefix}.W_G.weight": (H * dh, d),
        f"{prefix}.W_M.weight": (d, H * dh),
        **_attention(cfg, f"{prefix}.swa", gated=False, l=l),
        **_norm(cfg, f"{prefix}.norm_swa"),  # MAL: the SWA layer's own pre-norm over z = h + Mem(h)
    }
    return {**out, f"{prefix}.persistent": (cfg.mem_persistent, d)} if cfg.mem_persistent else out


MIXERS = {
    "attention": lambda cfg, p, l: _attention(cfg, p, gated=False, l=l),
    "gated_attention": lambda cfg, p, l: _attention(cfg, p, gated=True, l=l),
    "titans": _titans,
    "hope_attention": lambda cfg, p, l: _attention(cfg, p, gated=False, l=l),
}
MLP_MATRICES = {"swiglu": ("W_gate", "W_in"), "gelu": ("W_in",)}  # the (d_l, d) inputs; W_out is (d, d_l)


def _mlp(cfg: TLMConfig, prefix: str, width: int) -> Shapes:
    out = {f"{prefix}.{m}.weight": (width, cfg.d_model) for m in MLP_MATRICES[cfg.mlp]}
    return {**out, f"{prefix}.W_out.weight": (cfg.d_model, width)}


def _cms_level(cfg: TLMConfig, prefix: str, width: int, chunk: int, own_norm: bool) -> Shapes:
    """One continuum-memory level (models/cms.py): its MLP, its own pre-norm unless it reads ln2, and a
    step-size logit when it updates within a context (chunk < max_seq_len)."""
    out = {**(_norm(cfg, f"{prefix}.norm") if own_norm else {}), **_mlp(cfg, prefix, width)}
    return {**out, f"{prefix}.lr_logit": (1,)} if chunk < cfg.max_seq_len else out


def _block(cfg: TLMConfig, l: int) -> Shapes:
    p = f"blocks.{l}"
    out = {**_norm(cfg, f"{p}.ln1"), **MIXERS[cfg.mixer](cfg, f"{p}.attn", l), **_norm(cfg, f"{p}.ln2")}
    if cfg.mixer != "hope_attention":
        return {**out, **_mlp(cfg, f"{p}.mlp", cfg.d_ff[l])}
    # Hope-attention's continuum memory: levels 0..K-2 under mlp.levels.i, the last level is mlp itself;
    # the first level reads the block's ln2, every later one owns its norm
    chunks = cfg.cms_chunks
    for i, c in enumerate(chunks[:-1]):
        out.update(_cms_level(cfg, f"{p}.mlp.levels.{i}", cfg.d_ff[l], c, own_norm=i > 0))
    return {**out, **_cms_level(cfg, f"{p}.mlp", cfg.d_ff[l], chunks[-1], own_norm=len(chunks) > 1)}


def state_shapes(cfg: TLMConfig) -> Shapes:
    """Every state-dict entry of TaperedLM(cfg) with its shape (both names of tied embeddings)."""
    V, d = cfg.vocab_size, cfg.d_model
    out: Shapes = {"embed.weight": (V, d)}
    if cfg.positions == "learned":
        out["pos_embed.weight"] = (cfg.max_seq_len, d)
    for l in range(cfg.n_layers):
        out.update(_block(cfg, l))
    return {**out, **_norm(cfg, "ln_final.norm"), "unembed.weight": (V, d)}


def required_groups(cfg: TLMConfig) -> list[tuple[str, ...]]:
    """Names a weights file must hold: one of each group (a tied tensor is stored under one name)."""
    tied = set(TIED) if cfg.tie_embeddings else set()
    return [(n,) for n in state_shapes(cfg) if n not in tied] + ([TIED] if tied else [])
