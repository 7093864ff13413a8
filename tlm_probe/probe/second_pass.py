"""The probe's second pass: the importance statistics (importance/suite.py) on the sequences the stream
kept, those this model and world size cannot give refused with their reason, the ablations that can run
inside the stream (importance/stream_ablations.py) chosen before it, and provenance's importance record."""

from __future__ import annotations

import torch

from tlm_probe import importance as imp
from tlm_probe.probe.plan import NEURON_STATS, StatPlan
from tlm_probe.probe.rows import why_no_agreement
from tlm_probe.probe.stream import Stream
from tlm_probe.progress import tick
from tlm_probe.statistic_names import STATISTICS
from tlm_probe.stats.reduce import all_reduce_int


def second_pass(pm, plan: StatPlan, importance, opts, stream: Stream, progress: bool):
    """The second pass, on the kept sequences, of the statistics `importance` (importance_stats) keeps;
    the refused ones get their reason in provenance. With progress, its expected cost is said first
    (importance/cost.py)."""
    kept = stream.kept
    if not plan.importance:
        return [], [], None, {}
    stats, refused = importance
    with torch.inference_mode(False):  # the stream ran under inference_mode; gradients need plain tensors
        batches = [{k: v.clone() for k, v in b.items()} for b in kept]
        notice = imp.CostNotice(stream.n_seqs) if progress else None
        rows, mats, info = imp.run_importance(
            pm, batches, stats, opts, tick if progress else _untracked, notice, fused=stream.fused
        )
    asked = set(plan.asked)
    info["skipped"] = {k: v for k, v in {**refused, **info["skipped"]}.items() if k in asked}
    info["sequences"] = all_reduce_int(sum(len(b["input_ids"]) for b in kept))
    info["statistic_needs"] = {s: sorted(STATISTICS.get(s).needs) for s in plan.importance if s in asked}
    info["options"] = {k: v for k, v in opts.__dict__.items() if k != "probe_labels"}
    return rows, mats, info, refused


def importance_stats(pm, plan: StatPlan, world: int) -> tuple[list[str], dict[str, str]]:
    """(the importance statistics this model and world size can give, the others with their reason)."""
    refused = imp.reasons(list(plan.importance), pm.is_causal and pm.lm_head() is not None, world)
    if pm.neuron_refusal:  # mixture of experts: no one neuron tensor per layer (capture/widths.py)
        refused |= {s: pm.neuron_refusal for s in plan.importance if s in NEURON_STATS}
    if pm.lens_refusal:  # a logit scale or soft cap after the head: the lens would not be the model's readout
        why = f"{pm.lens_refusal}; the lens (final norm + head) would not be the model's own readout"
        refused |= {s: why for s in plan.importance if "lens" in STATISTICS.get(s).needs}
    return [s for s in plan.importance if s not in refused], refused


def fused_ablations(stats: list[str], plan: StatPlan, opts, backend):
    """The ablations of `stats` (the importance statistics kept) run in the stream
    (importance/stream_ablations.py) where its forward is the clean one the importance pass would run: the
    native backend's, not under eager attention."""
    if getattr(backend, "name", None) != "native" or plan.attention or not imp.fusable(stats):
        return None
    return imp.StreamAblations(backend.pm, stats, opts)


def _untracked(it, description: str):
    return it


def importance_record(info: dict, plan: StatPlan, refused: dict, agreement: list, target) -> dict:
    """provenance.json's importance record, with the reason each asked agreement row is missing."""
    missing = {s: why_no_agreement(s, info["skipped"], refused) for s in plan.asked if s in imp.AGREEMENT}
    given = {r["statistic"] for r in agreement}
    info["skipped"].update({s: why for s, why in missing.items() if s not in given})
    return {**info, "agreement_target": target}
