"""Hope-attention's training hooks (its row's `training`): multi-frequency updates of the continuum memory
(models/cms.py). A level with period C takes an optimizer step on training steps C, 2C, 3C, ... (1-based)
with the mean of its gradients over the C steps since its last update, and holds still in between.

The hook sits between gradient clipping and `opt.step()`: on a step where a level is not due, its fresh
gradients are added to a running sum and its `.grad` is set to None, which AdamW skips entirely (no moment
update, no weight decay); when it is due, the mean of the sum is put back into `.grad`. The running sums
are training state: `state_dict()` goes into every checkpoint, so a resume mid-period is exact.
Under FSDP the gradients are sharded DTensors; the schedule is refused there rather than half-supported.
"""

from __future__ import annotations

import torch
from torch import nn

from tlm_probe.errors import UserError
from tlm_probe.models.cms import update_periods
from tlm_probe.models.mixer_spec import TrainingHooks


class SlowLevels(TrainingHooks):
    def __init__(self, model: nn.Module, fsdp: bool):
        super().__init__(model, fsdp)
        self.periods = update_periods(model)  # name -> period > 1 (none: every level steps every step)
        if self.periods and fsdp:
            raise UserError("continuum-memory update periods above 1 are not supported with --fsdp; use DDP")
        self.params = {n: p for n, p in model.named_parameters() if n in self.periods}
        self.sums = {n: torch.zeros_like(p) for n, p in self.params.items()}

    @torch.no_grad()
    def before_step(self, step: int) -> None:
        for name, p in self.params.items():
            if p.grad is not None:
                self.sums[name].add_(p.grad)
            period = self.periods[name]
            if step % period == 0:
                p.grad = self.sums[name] / period
                self.sums[name] = torch.zeros_like(p)
            else:
                p.grad = None

    def state_dict(self) -> dict:
        sums = {name: s.detach().cpu().clone() for name, s in self.sums.items()}
        return {"multifreq": sums} if self.periods else {}

    def load_state_dict(self, extra: dict) -> None:
        state = extra.get("multifreq", {})
        missing = sorted(set(self.sums) - set(state))
        if missing:
            raise UserError(f"the checkpoint has no accumulated gradients for {missing[0]}; cannot resume")
        for name in self.sums:
            self.sums[name] = state[name].to(self.sums[name].device, self.sums[name].dtype)
