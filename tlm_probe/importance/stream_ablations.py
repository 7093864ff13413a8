"""Ablations fused with the probe's own clean forward: no clean forward of their own (issue 34).

When the probe streams its batches through the native backend (probe/engine.py), the forward of a batch
the importance pass keeps is already the clean forward the ablations need. Run there, with the LM head
(the stream otherwise stops before it) and recorded by the restart (restart.py: that one batch's L x B x T x
d layer outputs, references to the stream's own tensors), its logits give the clean NLL and its layer
outputs the cached stream each ablated forward restarts from, right after it and before the next batch.
The pass then costs the head on the kept rows, the restart's one-block self-check on the first batch, and
the restarted ablated forwards: the same ΔNLL, summed in the same order, as run_importance's ablation pass.

Only ablations without calibration (zero, skip): mean and resample ablation need the means and pools of
the whole clean pass before their first ablated forward, so they keep the importance pass's own.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from tlm_probe.importance.passes import PassCounter
from tlm_probe.importance.suite import ablation_effects, asked_options, counted_forward, token_mask
from tlm_probe.importance.taps import output_tensor
from tlm_probe.statistic_names import needs


def fusable(stats: list[str]) -> bool:
    """Whether the asked importance statistics' ablations can run in the probe's stream."""
    need = needs(stats)
    return "ablation" in need and "calib" not in need


class StreamAblations:
    """The ablation effects of the kept batches, each computed right after the stream's forward of it."""

    def __init__(self, pm, stats: list[str], opts=None):
        self.opts, _ = asked_options(stats, opts)
        self.counter = PassCounter(1)  # its calls are merged into run_importance's (rows counted there)
        self.effects = ablation_effects(pm, self.opts, counted_forward(pm, self.counter, "ablation"), None)

    def finish(self):
        """After the stream: the cache of its last batch dropped, the sums merged across ranks."""
        restart = self.effects.restart
        restart.outputs, restart.templates = [], []
        self.effects.all_reduce_()
        return self.effects

    def recording(self):
        """Around the stream's forward of a kept batch: records its layer outputs."""
        return self.effects.restart.recording()

    @torch.no_grad()
    def update(self, ids: torch.Tensor, attention_mask: torch.Tensor, out, rows: torch.Tensor) -> None:
        """The ablations of `rows` of the batch the stream just forwarded (`out`: its model output)."""
        B, restart = ids.shape[0], self.effects.restart
        whole = len(rows) == B
        batch = {"input_ids": ids, "attention_mask": attention_mask}
        batch = batch if whole else {k: v.index_select(0, rows) for k, v in batch.items()}
        clean = output_tensor(out)
        clean = clean if whole else clean.index_select(0, rows)
        self.counter.forward("ablation", len(rows), restart.head)  # the head the stream ran for them
        with restart.rows(rows, B) if not whole else nullcontext():
            self.effects.update(batch, token_mask(batch, self.opts.exclude_bos), clean, recorded=True)
