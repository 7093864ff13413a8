"""Hope-attention's continuum memory system (CMS; Behrouz et al., "Nested Learning: The Illusion of Deep
Learning Architectures", arXiv 2512.24695, section 7, eqs. 70-71).

Hope-attention is Hope with its self-modifying sequence model replaced by softmax attention, followed by the
CMS in place of the MLP: a chain of K levels, each a residual MLP with its own pre-norm,
    x_ℓ = x_{ℓ−1} + MLP_ℓ(norm_ℓ(x_{ℓ−1})),   x_0 = resid_mid,   hook_mlp_out = x_K − x_0 = Σ_ℓ MLP_ℓ(·),
where level ℓ updates its weights IN CONTEXT once every C_ℓ tokens (eq. 71; models/cms_update.py: the sum
of the chunk's error terms, chunk-parallel, causal across chunk boundaries) and its initial weights θ_0
are ordinary parameters trained by the outer optimizer across contexts. Its step size is learned:
η_ℓ = CMS_LR_MAX · σ(lr_logit_ℓ). A level whose chunk is >= max_seq_len never updates within a context; it
is the CMS's slowest, most persistent level (a plain residual MLP, no step-size parameter). Chunk sizes are
`cfg.cms_chunks`, in chain order. The first level's norm is the block's ln2 (so a one-level CMS with a
chunk >= max_seq_len is exactly the plain pre-norm MLP block); later levels own theirs (`levels.{i}.norm`,
and `norm` for the last level).

Taper: the schedule acts on the levels' widths. config_with_schedule splits the block's MLP budget d_ff
evenly over the K levels and applies the schedule to d_ff/K: every level of block l has width d_l (the
schedule's ratio times d_ff/K), so Σ_l d_l = L·d_ff/K for each level and the stack total equals uniform's.

Optional, under its own name: `cfg.cms_step_periods`, the earlier optimizer-step reading (level ℓ takes an
AdamW step only every P_ℓ optimizer steps; models/cms_steps.py). Empty by default: every level steps every
optimizer step, and the multi-frequency behaviour is the in-context one above.

Contract hooks: the last level of the chain is the module itself (its W_gate/W_in/W_out and hook_pre /
hook_post are those of models/mlp.py), so `blocks.{l}.mlp.hook_pre` (width d_l), `mlp.hook_post` and
`mlp.W_out` mean what they mean for any block; earlier levels are `blocks.{l}.mlp.levels.{i}` with the same
names; `mlp.hook_level_in` is the last level's normalised input.
"""

from __future__ import annotations

import torch
from torch import nn
from transformer_lens.hook_points import HookPoint

from tlm_probe.models import cms_update
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.layers import make_norm
from tlm_probe.models.mixer_spec import MLPS

CMS_LR_MAX = 1.0
"""Largest in-context step size η of a level (its error term is averaged over features and the chunk)."""


class CMSLevel(nn.Module):
    def __init__(self, cfg: TLMConfig, d_ff: int, chunk: int, own_norm: bool, layer: int):
        super().__init__()
        self.kind, self.chunk = cfg.mlp, chunk
        scale = cfg.norm_scale_at(layer)  # a pre-norm of block `layer`: depth-scaled as ln2 (norm_scaling)
        self.norm = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps, scale) if own_norm else None
        for name, child in MLPS[cfg.mlp](cfg.d_model, d_ff).named_children():
            self.add_module(name, child)  # W_gate/W_in/W_out and hook_pre/hook_post, as in models/mlp.py
        self.adaptive = chunk < cfg.max_seq_len
        self.lr_logit = nn.Parameter(torch.zeros(1)) if self.adaptive else None  # η = CMS_LR_MAX/2 at init

    def read(self, x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        """MLP output (B, T, d) on the normalised input x (B, T, d)."""
        if not self.adaptive:
            return MLPS[self.kind].forward(self, x)
        W0 = [getattr(self, name).weight for name in cms_update.WEIGHTS[self.kind]]
        eta = CMS_LR_MAX * torch.sigmoid(self.lr_logit)
        # the updates' small differences of weights run in float32 even under bf16 autocast
        with torch.autocast(x.device.type, enabled=False):
            W0 = [w.float() for w in W0]
            y = cms_update.read_chunked(self.kind, W0, x.float(), valid, eta.float(), self.chunk, self._hook)
        return y.to(x.dtype)

    def _hook(self, name: str, t: torch.Tensor) -> torch.Tensor:
        return getattr(self, f"hook_{name}")(t)

    def own_params(self) -> list[nn.Parameter]:
        return [p for n, p in self.named_parameters() if not n.startswith("levels.")]


class ContinuumMemory(CMSLevel):
    """The CMS of one block; the module itself is the chain's last level."""

    reads_stream = True  # the block passes the residual stream and its ln2, not ln2(stream)

    def __init__(self, cfg: TLMConfig, layer: int):
        chunks, d_ff = cfg.cms_chunks, cfg.d_ff[layer]
        super().__init__(cfg, d_ff, chunks[-1], own_norm=len(chunks) > 1, layer=layer)
        self.levels = nn.ModuleList(CMSLevel(cfg, d_ff, c, own_norm=i > 0, layer=layer)
                                    for i, c in enumerate(chunks[:-1]))
        self.step_periods = cfg.cms_step_periods or (1,) * len(chunks)
        self.hook_level_in = HookPoint()  # (B, T, d_model): the last level's normalised input

    def forward(self, x: torch.Tensor, first_norm: nn.Module, valid: torch.Tensor | None = None):
        """Σ_ℓ MLP_ℓ(norm_ℓ(x_{ℓ−1})) (B, T, d) for the residual stream x (B, T, d) = resid_mid."""
        total = None
        chain = [*self.levels, self]
        for i, level in enumerate(chain):
            xn = (first_norm if i == 0 else level.norm)(x)
            if level is self:
                xn = self.hook_level_in(xn)
            u = level.read(xn, valid)
            total = u if total is None else total + u
            x = x + u
        return total

    def level_params(self) -> list[tuple[int, list[nn.Parameter]]]:
        """(optimizer-step period, parameters) of each level, in chain order."""
        chain = [level.own_params() for level in self.levels] + [self.own_params()]
        return list(zip(self.step_periods, chain, strict=True))


def update_periods(model: nn.Module) -> dict[str, int]:
    """Parameter name -> optimizer-step period, for the parameters of every CMS level with a period above 1
    (cfg.cms_step_periods; none by default)."""
    ids = {}
    for module in model.modules():
        if isinstance(module, ContinuumMemory):
            for period, params in module.level_params():
                ids.update({id(p): period for p in params if period > 1})
    return {name: ids[id(p)] for name, p in model.named_parameters() if id(p) in ids}
