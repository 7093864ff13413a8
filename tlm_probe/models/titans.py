"""Titans, memory as a layer (MAL; Behrouz, Zhong, Mirrokni 2025, arXiv 2501.00663, section 4.3).

The paper's MAL block is  x̃ = [p_1 … p_Np] || x,  y = M(x̃),  o = SW-Attn(y)  (section 4.3): persistent
memory tokens p (section 3.3) are prepended, the neural long-term memory M reads the sequence, and
sliding-window attention runs on the memory's output. We keep the sliding-window attention: without it
the mixer would be a pure recurrent memory (the paper's "LMM" ablation), not Titans-MAL; its window is
`cfg.window`. This whole mixer is the block's token mixer, so its output is `hook_attn_out` and the block
stays  z = h + Mixer(norm(h)),  h' = z + MLP_l(norm(z)).

Memory layer, following the paper's architectural details (section 4.4):
    q, k, v = SiLU(causal depthwise conv(x W_{Q,K,V}))    1D depthwise conv after each projection, SiLU
    q, k  ← q/‖q‖, k/‖k‖ per head                         ℓ2-normalised queries and keys
    α_t, θ_t, η_t = σ(x_t W_r + b_r) per head            data-dependent forget gate, step size (× lr_max),
                                                          and momentum (eqs. 10 and 13)
    y_t = M_t(q_t) per head (models/memory.py: eqs. 10, 12, 13, 15 with chunk-wise parallel training, 3.2)
    m = W_M (RMSNorm(y) ⊙ σ(x W_G))                      "normalization and gating with a linear layer
                                                          before the final output projection"
    o = SW-Attn(m)                                       (models/attention.py, RoPE, window cfg.window)
Persistent tokens pass through the memory (they write to it first) but only the T real positions go on
to the attention. Each head's memory is W2 silu(W1 x) with learnable initial weights (meta-learned
across sequences) and zero initial momentum. Hook points: hook_mem_q/k/v (B, T, H, d_h) after the
normalisation, hook_mem_read (B, T, H, d_h) the raw read-out, hook_mem_out (B, T, d) the memory layer's
output (the attention's input); the attention's own hooks live under `swa`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from tlm_probe.models.attention import Attention
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.layers import RMSNorm
from tlm_probe.models.memory import memory_chunked, memory_rates

MEM_LR_MAX = 0.1
"""Largest inner step size θ (with each token's gradient clipped to norm 1, models/memory.py GRAD_CLIP)."""
RATE_BIAS = (-4.0, 0.0, 0.0)
"""Initial logits of (α, θ, η): forget little (α ≈ 0.02), step θ ≈ lr_max/2, momentum η ≈ 0.5."""


class Titans(nn.Module):
    def __init__(self, cfg: TLMConfig):
        super().__init__()
        H, dh, d = cfg.n_heads, cfg.d_head, cfg.d_model
        self.n_heads, self.d_head, self.chunk, self.kernel = H, dh, cfg.mem_chunk, cfg.conv_kernel
        self.W_QKV = nn.Linear(d, 3 * H * dh, bias=False)
        self.conv = nn.Conv1d(3 * H * dh, 3 * H * dh, cfg.conv_kernel, groups=3 * H * dh, bias=False)
        self.W_rates = nn.Linear(d, 3 * H)
        d_m = cfg.mem_expand * dh
        self.mem_W1 = nn.Parameter(torch.empty(H, d_m, dh))
        self.mem_W2 = nn.Parameter(torch.empty(H, dh, d_m))
        self.persistent = nn.Parameter(torch.empty(cfg.mem_persistent, d)) if cfg.mem_persistent else None
        self.mem_norm = RMSNorm(dh, cfg.norm_eps)
        self.W_G = nn.Linear(d, H * dh, bias=False)
        self.W_M = nn.Linear(H * dh, d, bias=False)
        self.swa = Attention(cfg, window=cfg.window)
        for name in ("q", "k", "v", "read", "out"):
            setattr(self, f"hook_mem_{name}", HookPoint())
        self.reset_memory()

    @torch.no_grad()
    def reset_memory(self) -> None:
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
        # the inner loop's products of decays and gradients run in float32 even under bf16 autocast
        with torch.autocast(x.device.type, enabled=False):
            y = memory_chunked(heads(q), heads(k), heads(v), *rates, W1, W2, self.chunk)
        return y.view(B, self.n_heads, T, self.d_head).transpose(1, 2).to(x.dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None, valid=None):
        B, T, _ = x.shape
        if self.persistent is not None:
            n = self.persistent.shape[0]
            x_mem = torch.cat([self.persistent.to(x.dtype).expand(B, n, -1), x], dim=1)
            if valid is not None:
                valid = torch.cat([valid.new_ones(B, n), valid], dim=1)
            y = self.memory(x_mem, valid)[:, n:]
        else:
            y = self.memory(x, valid)
        y = self.hook_mem_read(y)  # (B, T, H, dh)
        gate = torch.sigmoid(self.W_G(x)).view(B, T, self.n_heads, self.d_head)
        m = self.hook_mem_out(self.W_M((self.mem_norm(y) * gate).reshape(B, T, -1)))  # (B, T, d)
        return self.swa(m, positions, mask)
