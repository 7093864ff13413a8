"""Small building blocks: normalisation layers and rotary position embeddings.

Each norm has TransformerLens's `hook_scale` (B, T, 1): the denominator sqrt(mean(x²) + eps) of the
normalisation (x centred first for LayerNorm), so that the normalised stream is x / scale, as
ActivationCache.apply_ln_to_stack divides by it. It is formed only while hooked (models/hooks.py): the
output is the unhooked operations' unless a hook edits the scale, which then drives it (x / scale · w + b).
`out_scale` multiplies the output (LayerNorm Scaling, config.NORM_SCALINGS; 1.0: no multiplication at all).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from tlm_probe.models.hooks import edit, has_hooks


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float, out_scale: float = 1.0):
        super().__init__()
        self.eps, self.out_scale = eps, out_scale
        self.weight = nn.Parameter(torch.ones(d))
        self.hook_scale = HookPoint()

    def forward(self, x: torch.Tensor, hook_scale: HookPoint | None = None) -> torch.Tensor:
        """hook_scale: the hook point to use instead of this norm's own (the final norm's, tlm.py)."""
        hook = self.hook_scale if hook_scale is None else hook_scale
        x32 = x.float()
        ms = x32.pow(2).mean(-1, keepdim=True) + self.eps  # (B, T, 1)
        scale = edit(hook, ms.sqrt()) if has_hooks(hook) else None
        x32 = x32 * torch.rsqrt(ms) if scale is None else x32 / scale
        return _scaled(x32.type_as(x) * self.weight, self.out_scale)


class LayerNorm(nn.Module):
    """nn.LayerNorm's parameters (weight, bias) and output (F.layer_norm), with hook_scale."""

    def __init__(self, d: int, eps: float, out_scale: float = 1.0):
        super().__init__()
        self.eps, self.out_scale, self.normalized_shape = eps, out_scale, (d,)
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.hook_scale = HookPoint()

    def forward(self, x: torch.Tensor, hook_scale: HookPoint | None = None) -> torch.Tensor:
        hook = self.hook_scale if hook_scale is None else hook_scale
        scale = None
        if has_hooks(hook):
            x32 = x.float()
            centred = x32 - x32.mean(-1, keepdim=True)
            scale = edit(hook, (centred.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())  # (B, T, 1)
        if scale is None:
            y = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        else:
            y = (centred / scale).type_as(x) * self.weight + self.bias
        return _scaled(y, self.out_scale)


def _scaled(y: torch.Tensor, out_scale: float) -> torch.Tensor:
    return y if out_scale == 1.0 else y * out_scale


NORMS = {"rmsnorm": RMSNorm, "layernorm": LayerNorm}


def make_norm(kind: str, d: int, eps: float, out_scale: float = 1.0) -> nn.Module:
    return NORMS[kind](d, eps, out_scale)


class Rotary(nn.Module):
    """Rotary embeddings (rotate-half convention, as in Llama / GPT-NeoX)."""

    def __init__(self, d_head: int, max_seq_len: int, theta: float):
        super().__init__()
        self.d_head, self.max_seq_len, self.theta = d_head, max_seq_len, theta
        self.register_buffer("cos", torch.empty(max_seq_len, d_head), persistent=False)
        self.register_buffer("sin", torch.empty(max_seq_len, d_head), persistent=False)
        self.tlm_init()

    @torch.no_grad()
    def tlm_init(self) -> None:
        """(Re)compute the tables; also called by loaders that materialise modules from the meta device."""
        if self.cos.is_meta:
            return
        dev = self.cos.device
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.d_head, 2, dtype=torch.float32, device=dev)
                                         / self.d_head))
        t = torch.arange(self.max_seq_len, dtype=torch.float32, device=dev)
        freqs = torch.outer(t, inv_freq)  # (T, d_head/2)
        emb = torch.cat([freqs, freqs], dim=-1)  # (T, d_head)
        self.cos.copy_(emb.cos())
        self.sin.copy_(emb.sin())

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x: (B, H, T, d_head); positions: (B, T)
        cos = self.cos[positions].unsqueeze(1).to(x.dtype)  # (B, 1, T, d_head)
        sin = self.sin[positions].unsqueeze(1).to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        rotated = torch.cat([-x2, x1], dim=-1)
        return x * cos + rotated * sin
