"""The layer-importance suite on a ProbeModel: three passes over the same batches.

1. clean forward: residual geometry, neuron activity, logit lens, a seeded token sample, and the
   calibration (means and pools) for mean/resample ablation;
2. ablations, G at a time on the batch repeated G times;
3. gradients, one backward per sequence for the first `grad_sequences` sequences (causal LMs only).
Then the sampled statistics (CKA, effective rank, participation ratio, linear probes) and weight
statistics (stable rank). Returns tidy rows; probe() adds them to its tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from tlm_probe.importance.ablation import Calibration, calibrating
from tlm_probe.importance.ablation_run import AblationEffects, token_nll
from tlm_probe.importance.first_pass import FirstPass
from tlm_probe.importance.gradients import GradientImportance
from tlm_probe.importance.options import DEFAULT_ABLATIONS, ImportanceOptions  # noqa: F401 (re-export)
from tlm_probe.importance.tables import finish_tables
from tlm_probe.importance.taps import ablation_plan, capturing, output_tensor

NO_LM = "encoder without a causal LM head: no next-token distribution or loss"


def token_mask(batch: dict, exclude_bos: bool) -> torch.Tensor:
    mask = batch["attention_mask"].bool().clone()
    if exclude_bos:
        mask[:, 0] = False
    return mask


def _forward(pm) -> Callable[[dict], torch.Tensor]:
    return lambda b: output_tensor(pm.forward(b["input_ids"], b["attention_mask"]))


@torch.no_grad()
def _first_pass(pm, batches, opts, track) -> tuple[FirstPass, Calibration]:
    acc = FirstPass(pm, opts)
    calib = Calibration(opts.pool_size, opts.seed)
    targets = list(dict.fromkeys(ab.module for ab in ablation_plan(pm, opts.ablations) if ab.kind != "skip"))
    mask_ref: dict = {}
    with capturing(pm) as store, calibrating(targets, calib, mask_ref):
        for batch in track(batches, "importance: clean pass"):
            mask_ref["mask"] = token_mask(batch, opts.exclude_bos)
            out = _forward(pm)(batch)
            acc.update(store, out, batch, mask_ref["mask"])
    return acc, calib


def _ablation_pass(pm, batches, opts, calib, track) -> AblationEffects:
    metric = "dnll" if pm.is_causal and pm.lm_head() is not None else "shift"
    plan = ablation_plan(pm, opts.ablations)
    eff = AblationEffects(_forward(pm), plan, pm.n_layers, metric, calib, opts.ablation_rows)
    for batch in track(batches, "importance: ablations"):
        eff.update(batch, token_mask(batch, opts.exclude_bos))
    return eff


def _sequences(batches: Iterable[dict], limit: int):
    n = 0
    for batch in batches:
        for i in range(batch["input_ids"].shape[0]):
            if n >= limit:
                return
            n += 1
            yield {k: v[i : i + 1] for k, v in batch.items()}


def _gradient_pass(pm, batches, opts, track) -> GradientImportance:
    groups = {l: [p for p in pm.mlp(l).parameters()] for l in range(pm.n_layers)}
    gi = GradientImportance(groups)
    params = list(pm.model.parameters())
    saved = [p.requires_grad for p in params]
    mine = {id(p) for g in groups.values() for p in g}
    forward = _forward(pm)

    def loss_fn(seq):
        mask = token_mask(seq, opts.exclude_bos)
        nll = token_nll(forward(seq), seq["input_ids"])
        keep = mask[:, :-1] & mask[:, 1:]
        return nll[keep].sum(), int(keep.sum())

    try:
        for p in params:  # weight gradients only where needed: the backward skips everything else
            p.requires_grad_(id(p) in mine)
        with torch.enable_grad():
            for seq in track(list(_sequences(batches, opts.grad_sequences)), "importance: gradients"):
                gi.update(seq, loss_fn)
    finally:
        for p, flag in zip(params, saved, strict=True):
            p.requires_grad_(flag)
    return gi


def _no_track(it, description):
    return it


def run_importance(pm, batches: list[dict], opts: ImportanceOptions | None = None, track=_no_track):
    """All importance statistics of `pm` on `batches` (dicts of input_ids and attention_mask (B, T)).

    Returns (rows, matrices, info): per-layer tidy rows, layer x layer rows and a provenance dict
    (sample sizes, seeds, what was skipped and why).
    """
    opts = opts or ImportanceOptions()
    device = next(pm.model.parameters()).device
    batches = [{k: v.to(device) for k, v in b.items()} for b in batches]
    first, calib = _first_pass(pm, batches, opts, track)
    effects = _ablation_pass(pm, batches, opts, calib, track)
    causal = pm.is_causal and pm.lm_head() is not None
    grads = _gradient_pass(pm, batches, opts, track) if causal else None
    skipped = (
        {}
        if causal
        else {
            s: NO_LM for s in ("logit_lens_*", "ablation_dnll_*", "taylor_mlp", "fisher_mlp", "grad_norm_mlp")
        }
    )
    return finish_tables(pm, opts, first, effects, grads, skipped)
