"""MLPs of per-layer width d_l: SwiGLU (3·d·d_l weights) or GELU (2·d·d_l weights), no biases.

d_l = 0 is a block with no MLP: its matrices are (0, d) / (d, 0), hold no parameters, and its output is
exactly zero (a sum over an empty inner dimension), so the block is z + 0 with the same module tree,
state-dict names and hooks as any other (hook_pre/hook_post fire with (B, T, 0) tensors)."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint


def linear(d_in: int, d_out: int) -> nn.Linear:
    """nn.Linear without bias. An empty one (d_l = 0) has nothing to initialise: nn.init's "zero-element
    tensor" warning is silenced for it (and it draws no random numbers, as nn.Linear draws none for it)."""
    with warnings.catch_warnings():
        if d_in * d_out == 0:
            warnings.filterwarnings("ignore", message="Initializing zero-element tensors is a no-op")
        return nn.Linear(d_in, d_out, bias=False)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.W_gate = linear(d_model, d_ff)
        self.W_in = linear(d_model, d_ff)
        self.W_out = linear(d_ff, d_model)
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
        self.W_in = linear(d_model, d_ff)
        self.W_out = linear(d_ff, d_model)
        self.hook_pre = HookPoint()  # (B, T, d_l)
        self.hook_post = HookPoint()  # (B, T, d_l)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.W_out(self.hook_post(F.gelu(self.hook_pre(self.W_in(x)))))



