"""Width utilisation of MLPs: how many neurons a layer really uses, and the rank of what it writes.

A neuron counts as active on a token when |activation| exceeds `act_threshold` times the RMS of that
layer's activations on the same token: a scale-free rule that works for ReLU, GELU and SwiGLU alike (GELU
and SwiGLU outputs are rarely exactly zero). A neuron is "rarely active" when it is active on fewer than
`freq_threshold` of the tokens; `dead_neuron_frac` is the fraction of such neurons in the layer.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from tlm_probe.importance.geometry import squared_singular_values
from tlm_probe.stats.reduce import all_reduce_, all_reduce_int


class NeuronActivity:
    """Per-neuron activation frequency of one MLP layer, streamed over tokens."""

    def __init__(self, width: int, act_threshold: float = 0.1):
        self.active = torch.zeros(width, dtype=torch.float64)
        self.count = 0
        self.act_threshold = act_threshold

    def update(self, post: torch.Tensor) -> None:
        """post: (N, d_l) post-activations of N valid tokens."""
        a = post.detach().float().abs()
        rms = a.square().mean(-1, keepdim=True).sqrt()
        self.active += (a > self.act_threshold * rms).sum(0).cpu().double()
        self.count += a.shape[0]

    def all_reduce_(self) -> None:
        all_reduce_(self.active)
        self.count = all_reduce_int(self.count)

    def frequency(self) -> np.ndarray:
        return (self.active / max(self.count, 1)).numpy()

    def dead_fraction(self, freq_threshold: float = 0.01) -> float:
        freq = self.frequency()
        return float((freq < freq_threshold).mean()) if freq.size else math.nan  # d_l = 0: no neurons


def weight_matrix(module: nn.Module) -> torch.Tensor:
    """The weight of an nn.Linear or a GPT-2 Conv1D (stored transposed); stable rank ignores the layout."""
    return module.weight.detach()


def stable_rank(weight: torch.Tensor) -> float:
    """||W||_F^2 / ||W||_2^2: how many directions carry the matrix's energy (1 <= sr <= rank)."""
    if weight.numel() == 0:  # a d_l = 0 block's empty matrix: no directions, 0/0
        return math.nan
    lam = squared_singular_values(weight.detach())  # sigma_i^2, descending
    return float(lam.sum() / lam[0]) if lam[0] > 0 else 0.0
