"""Small building blocks: normalisation layers and rotary position embeddings."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return x32.type_as(x) * self.weight


def make_norm(kind: str, d: int, eps: float) -> nn.Module:
    table = {"rmsnorm": lambda: RMSNorm(d, eps), "layernorm": lambda: nn.LayerNorm(d, eps=eps)}
    return table[kind]()


class Rotary(nn.Module):
    """Rotary embeddings (rotate-half convention, as in Llama / GPT-NeoX)."""

    def __init__(self, d_head: int, max_seq_len: int, theta: float):
        super().__init__()
        self.d_head, self.max_seq_len, self.theta = d_head, max_seq_len, theta
        self.register_buffer("cos", torch.empty(max_seq_len, d_head), persistent=False)
        self.register_buffer("sin", torch.empty(max_seq_len, d_head), persistent=False)
        self.reset()

    @torch.no_grad()
    def reset(self) -> None:
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
