"""Hope-attention's continuum memory system (CMS; Behrouz et al. 2025, "Nested Learning: The Illusion of
Deep Learning Architectures", section on the continuum memory system).

Hope-attention is Hope with its self-modifying sequence model replaced by softmax attention, followed by
the CMS: a chain of MLP levels whose parameters are updated at different frequencies,
    y_t = MLP^(f_k)( MLP^(f_{k−1})( … MLP^(f_1)(x_t) ) ),
    θ^(ℓ)_{i+1} = θ^(ℓ)_i − Σ_{t=i−C^(ℓ)}^{i} η_t ∇f(θ^(ℓ)_t; x_t)  if i ≡ 0 (mod C^(ℓ)),  else θ^(ℓ)_i,
i.e. level ℓ holds its parameters fixed for C^(ℓ) steps and then applies the gradients accumulated over
them. Our reading, which trains on a CPU: "steps" are optimizer steps of pre-training; level ℓ of every
block takes an AdamW step on training step n (1-based) iff n % C_ℓ == 0, with the mean of its (clipped)
gradients of the last C_ℓ steps; between its steps it is frozen and its AdamW moments do not move
(train/multifreq.py holds the accumulated gradients, saved in every checkpoint so resume is exact).
Periods are `cfg.cms_periods`, in chain order (level 1 first). The chain has no inner residuals: the block
keeps its one residual around the whole CMS, as around any MLP.

Taper: every level of block l has the block's width d_l (the schedule's ratio times the per-level mean),
so each level's widths sum to L·d_ff and the stack total equals uniform's.

Contract hooks: the last level of the chain is the module itself (its W_gate/W_in/W_out and hook_pre /
hook_post are those of models/mlp.py), so `blocks.{l}.mlp.hook_pre` (width d_l), `mlp.hook_post` and
`mlp.W_out` mean what they mean for any block; earlier levels are `blocks.{l}.mlp.levels.{i}` with the
same hook names.
"""

from __future__ import annotations

import torch
from torch import nn
from transformer_lens.hook_points import HookPoint

from tlm_probe.models.mlp import MLPS


class ContinuumMemory(nn.Module):
    def __init__(self, kind: str, d_model: int, d_ff: int, periods: tuple[int, ...]):
        super().__init__()
        self.kind, self.periods = kind, tuple(periods)
        self.levels = nn.ModuleList(MLPS[kind](d_model, d_ff) for _ in periods[:-1])
        for name, child in MLPS[kind](d_model, d_ff).named_children():  # the last level: this module
            self.add_module(name, child)
        self.hook_level_in = HookPoint()  # (B, T, d_model): the last level's input

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for level in self.levels:
            x = level(x)
        return MLPS[self.kind].forward(self, self.hook_level_in(x))

    def level_params(self) -> list[tuple[int, list[nn.Parameter]]]:
        """(period, parameters) of each level, in chain order."""
        last = [p for n, p in self.named_parameters() if not n.startswith("levels.")]
        chain = [list(level.parameters()) for level in self.levels] + [last]
        return list(zip(self.periods, chain, strict=True))


def update_periods(model: nn.Module) -> dict[str, int]:
    """Parameter name -> update period, for the parameters of every CMS level with a period above 1."""
    ids = {}
    for module in model.modules():
        if isinstance(module, ContinuumMemory):
            for period, params in module.level_params():
                ids.update({id(p): period for p in params if period > 1})
    return {name: ids[id(p)] for name, p in model.named_parameters() if id(p) in ids}
