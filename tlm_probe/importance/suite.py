"""The importance pass: probe/engine.py's second pass over a bounded set of the probed batches.

Only the parts the asked statistics need run (their rows' needs, statistic_names.STATISTICS):
1. a clean forward per batch through the probe's tap hooks: residual streams (angular distance,
   anisotropy, logit lens, the seeded token sample), neuron activity, and the calibration (means and
   pools) for mean/resample ablation;
2. ablations, G at a time on the batch repeated G times, each restarted from the cached clean stream at
   its lowest ablated layer where the model allows it (restart.py: (L+1)/2 of L blocks on average for
   single-block ablations, plus the head; the cache is at most L x B x T x d per batch); where the
   probe's stream already forwards the kept batches (native backend) and no ablation needs calibration,
   they run there instead, from its forward (stream_ablations.py): no clean forward of their own;
3. gradients: one backward per batch (Taylor, gradient norm) or per sequence (Fisher), on the sequences
   whose global index is below `grad_sequences`, so that torchrun ranks together take the same ones.
After each pass its sums are all-reduced across ranks; then the sampled statistics (CKA, effective rank,
participation ratio, linear probes) and weight statistics (stable rank). Returns tidy rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import torch

from tlm_probe.importance.ablation import Calibration, calibrating
from tlm_probe.importance.ablation_run import AblationEffects, token_nll
from tlm_probe.importance.first_pass import FirstPass, has_lens
from tlm_probe.importance.gradients import GradientImportance
from tlm_probe.importance.logit_lens import decoded_share, sampled_positions
from tlm_probe.importance.options import ImportanceOptions
from tlm_probe.importance.passes import PassCounter, head_share, lens_forwards
from tlm_probe.importance.restart import Restart
from tlm_probe.importance.tables import finish_tables
from tlm_probe.importance.taps import ablation_plan, capturing, output_tensor
from tlm_probe.statistic_names import FIRST_PASS, needs


def token_mask(batch: dict, exclude_bos: bool) -> torch.Tensor:
    mask = batch["attention_mask"].bool().clone()
    if exclude_bos:
        mask[:, 0] = False
    return mask


def counted_forward(pm, counter: PassCounter, name: str) -> Callable[..., torch.Tensor]:
    """The model's forward on a batch, counted in `counter` under pass `name`."""
    def fwd(b: dict, share: float = 1.0) -> torch.Tensor:
        """share: the part of one forward this call costs per row (a restarted ablation: restart.py)."""
        counter.forward(name, b["input_ids"].shape[0], share)
        return output_tensor(pm.forward(b["input_ids"], b["attention_mask"]))

    return fwd


@torch.no_grad()
def _first_pass(pm, batches, opts, need, track, counter) -> tuple[FirstPass, Calibration]:
    acc = FirstPass(pm, opts, need)
    calib = Calibration(opts.pool_size, opts.seed)
    plan = [ab for ab in ablation_plan(pm, opts.ablations) if ab.kind != "skip"] if "calib" in need else []
    targets = list(dict.fromkeys(ab.module for ab in plan))
    mask_ref: dict = {}
    forward = counted_forward(pm, counter, "clean")
    with capturing(pm, acc.needs_resid, bool(acc.neurons)) as store, calibrating(targets, calib, mask_ref):
        for batch in track(batches, "importance: clean pass"):
            mask_ref["mask"] = token_mask(batch, opts.exclude_bos)
            out = forward(batch)
            acc.update(store, out, batch, mask_ref["mask"])
            if acc.lens is not None:  # the decoded share of the rows: all of them, or the position sample's
                T = batch["input_ids"].shape[1]
                counter.extra("clean", lens_forwards(pm, acc.lens.batch_rows, counter.rows, T))
    acc.all_reduce_()
    calib.all_reduce_(targets, pm.d_model)
    return acc, calib


def ablation_effects(pm, opts, forward, calib) -> AblationEffects:
    """The ablation accumulator for this model (ΔNLL where it has an LM head, else the output shift)."""
    metric = "dnll" if pm.is_causal and pm.lm_head() is not None else "shift"
    plan = ablation_plan(pm, opts.ablations)
    restart = Restart([pm.layer(l) for l in range(pm.n_layers)], head_share(pm))
    return AblationEffects(forward, plan, pm.n_layers, metric, calib, opts.ablation_rows, restart)


def _ablation_pass(pm, batches, opts, calib, track, counter) -> AblationEffects:
    eff = ablation_effects(pm, opts, counted_forward(pm, counter, "ablation"), calib)
    for batch in track(batches, "importance: ablations"):
        eff.update(batch, token_mask(batch, opts.exclude_bos))
    eff.all_reduce_()
    return eff


def _chosen(batches: list[dict], limit: int, per_sequence: bool):
    """The sequences (global index < limit) of each batch: one at a time, or as one smaller batch."""
    for batch in batches:
        rows = (batch["seq_index"] < limit).nonzero()[:, 0]
        if per_sequence:
            yield from ({k: v[i : i + 1] for k, v in batch.items()} for i in rows.tolist())
        elif len(rows):
            yield {k: v[rows] for k, v in batch.items()}


def _gradient_pass(pm, batches, opts, per_sequence: bool, track, counter) -> GradientImportance:
    groups = {l: list(pm.mlp(l).parameters()) for l in range(pm.n_layers)}
    gi = GradientImportance(groups)
    params = list(pm.model.parameters())
    saved = [p.requires_grad for p in params]
    mine = {id(p) for g in groups.values() for p in g}
    forward = counted_forward(pm, counter, "gradients")

    def loss_fn(seq):
        mask = token_mask(seq, opts.exclude_bos)
        nll = token_nll(forward(seq), seq["input_ids"])
        keep = mask[:, :-1] & mask[:, 1:]
        counter.backward("gradients", seq["input_ids"].shape[0])
        return nll[keep].sum(), int(keep.sum())

    update = gi.update if per_sequence else gi.update_batch
    try:
        for p in params:  # weight gradients only where needed: the backward skips everything else
            p.requires_grad_(id(p) in mine)
        with torch.enable_grad():
            for seq in track(
                list(_chosen(batches, opts.grad_sequences, per_sequence)), "importance: gradients"
            ):
                update(seq, loss_fn)
    finally:
        for p, flag in zip(params, saved, strict=True):
            p.requires_grad_(flag)
    gi.all_reduce_()
    return gi


def _indexed(batches: list[dict]) -> list[dict]:
    """Batches without a global sequence index (one process) get their running index."""
    out, n = [], 0
    for b in batches:
        rows = b["input_ids"].shape[0]
        out.append(b if "seq_index" in b else {**b, "seq_index": torch.arange(n, n + rows)})
        n += rows
    return out


def _no_track(it, description):
    return it


def asked_options(stats: list[str],
                  opts: ImportanceOptions | None) -> tuple[ImportanceOptions, frozenset[str]]:
    """The options with only the asked ablation kinds, and what the asked statistics need."""
    opts = opts or ImportanceOptions()
    kinds = tuple(
        a for a in opts.ablations if any(s.startswith("ablation_") and s.endswith(f"_{a}") for s in stats)
    )
    return replace(opts, ablations=kinds), needs(stats)


def _gradients(pm, need: frozenset[str], opts: ImportanceOptions) -> bool:
    return "grad" in need and pm.is_causal and pm.lm_head() is not None and opts.grad_sequences > 0


def expected_passes(
    pm, batches: list[dict], stats: list[str], opts=None, restartable: bool = True, fused: bool = False
) -> dict:
    """info["passes"] of run_importance(pm, batches, stats, opts), before it runs: the same PassCounter fed
    the forwards each pass plans (the restart from the cached stream usable, or refused; the ablations
    fused with the probe's stream: stream_ablations.py). Equal to the counted passes when the restart's
    usability was guessed right (tests/test_importance_cost_line.py)."""
    opts, need = asked_options(stats, opts)
    batches = _indexed(batches)
    counter = PassCounter(sum(int(b["input_ids"].shape[0]) for b in batches))
    lens = has_lens(pm, need)
    for b in batches if need & FIRST_PASS else ():
        B, T = b["input_ids"].shape
        counter.forward("clean", B)
        if lens:
            pos = sampled_positions(T, opts.lens_positions, opts.seed)
            counter.extra("clean", lens_forwards(pm, B * decoded_share(pos, T), counter.rows, T))
    eff = ablation_effects(pm, opts, None, None) if "ablation" in need else None
    for i, b in enumerate(batches if eff is not None else ()):
        for rows, share in eff.planned(b["input_ids"].shape[0], i == 0, restartable, fused):
            counter.forward("ablation", rows, share)
    per_sequence = "grad_per_sequence" in need
    for seq in _chosen(batches, opts.grad_sequences, per_sequence) if _gradients(pm, need, opts) else ():
        counter.forward("gradients", seq["input_ids"].shape[0])
        counter.backward("gradients", seq["input_ids"].shape[0])
    return counter.summary()


def run_importance(
    pm,
    batches: list[dict],
    stats: list[str],
    opts: ImportanceOptions | None = None,
    track=_no_track,
    notice=None,
    fused=None,
):
    """The importance statistics `stats` of `pm` (names from statistic_names.STATISTICS, computable here).

    batches: dicts of input_ids, attention_mask (B, T) and seq_index (B,) (global sequence index).
    Returns (per-layer rows, layer x layer rows, info): info holds sample sizes, seeds, the passes run and
    the statistics that could not be computed on this input (name -> one-line reason). `notice`
    (cost.CostNotice) is told the expected passes before the run and times the first batch. `fused`
    (stream_ablations.StreamAblations): the ablations, already run in the probe's stream on these batches.
    """
    started = time.perf_counter()
    opts, need = asked_options(stats, opts)
    device = next(pm.model.parameters()).device
    batches = [{k: v.to(device) for k, v in b.items()} for b in _indexed(batches)]
    counter = PassCounter(sum(int(b["input_ids"].shape[0]) for b in batches))
    if notice is not None:  # the expected cost, before any pass runs; then the first batch's time
        expected = (expected_passes(pm, batches, stats, opts, r, fused is not None) for r in (True, False))
        notice.before(*expected, counter.rows)
        track = notice.timed(track, counter)
    first, calib = _first_pass(pm, batches, opts, need, track, counter) if need & FIRST_PASS else (None, None)
    if fused is not None:  # run in the stream: its forwards join this pass's count
        effects = fused.finish()
        counter.calls.update(fused.counter.calls)
    else:
        effects = _ablation_pass(pm, batches, opts, calib, track, counter) if "ablation" in need else None
    grads = None
    if _gradients(pm, need, opts):
        grads = _gradient_pass(pm, batches, opts, "grad_per_sequence" in need, track, counter)
    rows, matrices, info = finish_tables(pm, opts, set(stats), first, effects, grads)
    info["passes"] = counter.summary()
    if first is not None and first.lens is not None:
        info["logit_lens"] = first.lens_cost(time.perf_counter() - started)
    if effects is not None:  # how the ablated forwards ran: restarted, or in full and why
        info["ablation_restart"] = effects.restart.reason or "from the cached clean stream"
    return rows, matrices, info
