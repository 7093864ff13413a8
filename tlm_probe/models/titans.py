"""Titans, memory as a layer (MAL; Behrouz, Zhong, Mirrokni 2025, arXiv 2501.00663, section 4.3).

The paper's MAL model is a hybrid that stacks a neural-memory layer and a sliding-window-attention layer,
each with its residual connection, after persistent memory tokens are prepended to the sequence
(x̃ = [p_1 … p_Np] || x, y = M(x̃), o = SW-Attn(y), section 4.3). One block here is that pair, then the
block's MLP:
    h̃  = [p_1 … p_Np] || h                     persistent tokens (section 3.3) join the stream the layers see
    z   = h̃ + m,  m = MemoryLayer(ln1(h̃))      the memory layer, residual
    z'  = z + SW-Attn(norm_swa(z))               the SWA reads the stream with the memory's output added
    hook_attn_out = (z' − h̃) at the T real positions = m + SW-Attn(...),  then the block's MLP.
Real queries attend to every persistent token and to the real tokens fewer than `cfg.window` behind them;
persistent tokens see only the persistent tokens before them (their outputs are dropped). RoPE positions:
persistent tokens take 0..Np−1 and real tokens follow them. This whole mixer is the block's token mixer
(mixers.py: reads_stream), so resid_mid = resid_pre + hook_attn_out holds as for any block.

Taper: the schedule acts only on the block's MLP (width d_l), the feed-forward layer after the MAL pair.
The memory's own per-head MLP (d_m = mem_expand·d_h) is the memory's state, not a feed-forward layer, and
keeps its width in every layer. A heads schedule (cfg.layer_heads / layer_kv_heads) acts on the SWA's heads
only; the memory layer keeps n_heads heads in every layer. A memory-width schedule (cfg.layer_mem_width)
sets d_m per layer.

Memory layer, following the paper's architectural details (section 4.4):
    q, k, v = SiLU(causal depthwise conv(x W_{Q,K,V}))    1D depthwise conv after each projection, SiLU
    q, k  ← q/‖q‖, k/‖k‖ per head                         ℓ2-normalised queries and keys
    α_t, θ_t, η_t = σ(x_t W_r + b_r) per head            data-dependent forget gate, step size (× lr_max),
                                                          and momentum (eqs. 10 and 13)
    y_t = M_t(q_t) per head (models/memory.py: eqs. 10, 12, 13, 15 with chunk-wise parallel training, 3.2)
    m = W_M (RMSNorm(y) ⊙ σ(x W_G))                      "normalization and gating with a linear layer
                                                          before the final output projection"
Each head's memory is W2 silu(W1 x) with learnable initial weights (meta-learned across sequences) and zero
initial momentum. Hook points: hook_mem_q/k/v (B, T, H, d_h) after the normalisation, hook_mem_read
(B, T, H, d_h) the raw read-out, hook_mem_out (B, T, d) the memory layer's output m, hook_swa_in (B, T, d)
the stream the SWA reads (z); the attention's own hooks live under `swa`. `clip_fraction` holds the share of
this layer's writing tokens whose inner gradient hit the safety clip in the last forward (training logs it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from tlm_probe.models.attention import Attention, window_mask
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.layers import RMSNorm, make_norm
from tlm_probe.models.memory import memory_chunked, memory_rates
from tlm_probe.models.mixer_spec import TrainingHooks

MEM_LR_MAX = 0.1
"""Largest inner step size θ (on the loss averaged over the head dimension, models/memory.py)."""
RATE_BIAS = (-4.0, 0.0, 0.0)
"""Initial logits of (α, θ, η): forget little (α ≈ 0.02), step θ ≈ lr_max/2, momentum η ≈ 0.5."""


class Titans(nn.Module):
    reads_stream = True  # residual connections inside: the block passes the stream and its ln1

    def __init__(self, cfg: TLMConfig, layer: int = 0):
        super().__init__()
        H, dh, d = cfg.n_heads, cfg.d_head, cfg.d_model
        self.n_heads, self.d_head, self.chunk, self.kernel = H, dh, cfg.mem_chunk, cfg.conv_kernel
        self.W_QKV = nn.Linear(d, 3 * H * dh, bias=False)
        self.conv = nn.Conv1d(3 * H * dh, 3 * H * dh, cfg.conv_kernel, groups=3 * H * dh, bias=False)
        self.W_rates = nn.Linear(d, 3 * H)
        d_m = cfg.mem_width_at(layer)
        self.mem_W1 = nn.Parameter(torch.empty(H, d_m, dh))
        self.mem_W2 = nn.Parameter(torch.empty(H, dh, d_m))
        self.persistent = nn.Parameter(torch.empty(cfg.mem_persistent, d)) if cfg.mem_persistent else None
        self.mem_norm = RMSNorm(dh, cfg.norm_eps)
        self.W_G = nn.Linear(d, H * dh, bias=False)
        self.W_M = nn.Linear(H * dh, d, bias=False)
        self.norm_swa = make_norm(cfg.norm, d, cfg.norm_eps, cfg.norm_scale_at(layer))  # depth-scaled as ln1
        self.window = cfg.window
        # the SWA gets its mask from attention_mask (persistent keys are always visible), hence window 0;
        # its RoPE table covers the persistent tokens' positions too
        self.swa = Attention(cfg.replace(max_seq_len=cfg.max_seq_len + cfg.mem_persistent), layer, window=0)
        for name in ("q", "k", "v", "read", "out"):
            setattr(self, f"hook_mem_{name}", HookPoint())
        self.hook_swa_in = HookPoint()
        self.clip_fraction: torch.Tensor | None = None
        self.tlm_init()

    @torch.no_grad()
    def tlm_init(self) -> None:
        """Initialise what nn.Linear/Embedding initialisers do not reach (also after meta materialising)."""
        if self.mem_W1.is_meta:
            return
        nn.init.normal_(self.mem_W1, 0.0, self.d_head**-0.5)
        nn.init.normal_(self.mem_W2, 0.0, self.mem_W2.shape[-1] ** -0.5)
        nn.init.normal_(self.conv.weight, 0.0, self.kernel**-0.5)
        self.W_rates.bias.copy_(torch.tensor(RATE_BIAS).repeat_interleave(self.n_heads))
        if self.persistent is not None:
            nn.init.normal_(self.persistent, 0.0, 0.02)

    def _qkv(self, x: torch.Tensor):
        B, T, _ = x.shape
        h = self.W_QKV(x).transpose(1, 2)  # (B, 3·H·dh, T)
        h = F.silu(self.conv(F.pad(h, (self.kernel - 1, 0))))  # causal: left padding only
        q, k, v = h.transpose(1, 2).view(B, T, 3, self.n_heads, self.d_head).unbind(2)  # (B, T, H, dh)
        return F.normalize(q, dim=-1), F.normalize(k, dim=-1), v

    def memory(self, x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        """Memory read-outs (B, T, H, d_h) of the (persistent-prefixed) input x (B, T, d)."""
        B, T, _ = x.shape
        if valid is not None:
            x = x * valid[..., None]  # pads feed zeros to the convolution
        q, k, v = self._qkv(x)
        q, k, v = self.hook_mem_q(q), self.hook_mem_k(k), self.hook_mem_v(v)
        logits = self.W_rates(x).view(B, T, 3, self.n_heads).permute(0, 3, 1, 2)  # (B, H, T, 3)
        flat_valid = None if valid is None else valid[:, None].expand(B, self.n_heads, T).reshape(-1, T)
        rates = memory_rates(logits.reshape(-1, T, 3), flat_valid, MEM_LR_MAX)

        def heads(t):  # (B, T, H, dh) -> (B·H, T, dh)
            return t.transpose(1, 2).reshape(B * self.n_heads, T, self.d_head)

        W1 = self.mem_W1.expand(B, *self.mem_W1.shape).reshape(-1, *self.mem_W1.shape[1:])
        W2 = self.mem_W2.expand(B, *self.mem_W2.shape).reshape(-1, *self.mem_W2.shape[1:])
        stats: dict = {}
        # the inner loop's products of decays and gradients run in float32 even under bf16 autocast
        with torch.autocast(x.device.type, enabled=False):
            y = memory_chunked(heads(q), heads(k), heads(v), *rates, W1, W2, self.chunk, stats=stats)
        if stats:
            self.clip_fraction = stats["clipped"].float() / stats["tokens"].clamp_min(1)
        return y.view(B, self.n_heads, T, self.d_head).transpose(1, 2).to(x.dtype)

    def memory_layer(self, x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        """The memory layer's output m (B, T', d) on the normalised stream x (B, T', d)."""
        B, T, _ = x.shape
        y = self.hook_mem_read(self.memory(x, valid))  # (B, T', H, dh)
        gate = torch.sigmoid(self.W_G(x)).view(B, T, self.n_heads, self.d_head)
        return self.hook_mem_out(self.W_M((self.mem_norm(y) * gate).reshape(B, T, -1)))

    def attention_mask(self, positions: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor | None:
        """(B, 1, P+T, P+T) boolean mask of the SWA over persistent + real tokens (None: plain causal)."""
        P, (B, T) = self.n_persistent, positions.shape
        if P == 0 and mask is None and self.window >= T:
            return None
        real = window_mask(positions, mask, self.window).expand(B, 1, T, T)  # causal, padding, window
        dev = positions.device
        top = torch.cat([torch.ones(P, P, dtype=torch.bool, device=dev).tril(),
                         torch.zeros(P, T, dtype=torch.bool, device=dev)], dim=1).expand(B, 1, P, P + T)
        bottom = torch.cat([torch.ones(B, 1, T, P, dtype=torch.bool, device=dev), real], dim=-1)
        return torch.cat([top, bottom], dim=2)

    def forward(self, h: torch.Tensor, norm: nn.Module, positions: torch.Tensor, mask: torch.Tensor | None,
                valid=None) -> torch.Tensor:
        """The MAL pair's increment (B, T, d) to the residual stream h (B, T, d); norm: the block's ln1."""
        B, T, _ = h.shape
        P = self.n_persistent
        if P:
            h = torch.cat([self.persistent.to(h.dtype).expand(B, P, -1), h], dim=1)  # (B, P+T, d)
            if valid is not None:
                valid = torch.cat([valid.new_ones(B, P), valid], dim=1)
        m = self.memory_layer(norm(h), valid)
        z = self.hook_swa_in(h + m)
        pos = torch.cat([torch.arange(P, device=h.device).expand(B, P), positions + P], dim=1)
        s = self.swa(self.norm_swa(z), pos, self.attention_mask(positions, mask))
        return (m + s)[:, P:]

    @property
    def n_persistent(self) -> int:
        return 0 if self.persistent is None else self.persistent.shape[0]


class MemoryClipLog(TrainingHooks):
    """Titans' training hooks: at log steps, `mem_clip_frac`, the mean over its layers of the share of
    writing tokens whose inner gradient hit the safety clip (memory.GRAD_CLIP) in the last forward."""

    def log(self) -> dict[str, float]:
        values = [m.clip_fraction for m in self.model.modules()
                  if isinstance(m, Titans) and m.clip_fraction is not None]
        mean = torch.stack([v.float().cpu() for v in values]).mean() if values else None
        return {} if mean is None else {"mem_clip_frac": float(mean)}
