"""MLPs of per-layer width d_l: SwiGLU (3·d·d_l weights) or GELU (2·d·d_l weights), no biases."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.W_gate = nn.Linear(d_model, d_ff, bias=False)
        self.W_in = nn.Linear(d_model, d_ff, bias=False)
        self.W_out = nn.Linear(d_ff, d_model, bias=False)
        self.hook_pre = HookPoint()  # (B, T, d_l) gate pre-activation
        self.hook_pre_linear = HookPoint()  # (B, T, d_l)
        self.hook_post = HookPoint()  # (B, T, d_l)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.hook_pre(self.W_gate(x))
        lin = self.hook_pre_linear(self.W_in(x))
        return self.W_out(self.hook_post(F.silu(pre) * lin))


class GeluMLP(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.W_in = nn.Linear(d_model, d_ff, bias=False)
        self.W_out = nn.Linear(d_ff, d_model, bias=False)
        self.hook_pre = HookPoint()  # (B, T, d_l)
        self.hook_post = HookPoint()  # (B, T, d_l)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.W_out(self.hook_post(F.gelu(self.hook_pre(self.W_in(x)))))


MLPS = {"swiglu": SwiGLU, "gelu": GeluMLP}
