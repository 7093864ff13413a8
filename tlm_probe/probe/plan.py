"""What `--stats` asks of the probe (StatPlan: the rows written, and what must be computed for them), and
what this model can give of it: the statistics its block kind, its attention or its device map cannot
give are refused before the stream, with their reason (said once; provenance keeps it)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from tlm_probe import importance as imp
from tlm_probe.capture import ProbeModel
from tlm_probe.capture.attention import pattern_refusal
from tlm_probe.capture.guardrails import NO_MLP, unavailable
from tlm_probe.errors import UserError
from tlm_probe.probe.options import ProbeOptions
from tlm_probe.progress import say
from tlm_probe.statistic_names import ATTENTION, STATISTICS, asked_statistics
from tlm_probe.stats.alignment import PER_TOKEN as ALIGNMENT
from tlm_probe.stats.alignment import build_accumulators
from tlm_probe.stats.attention import AttentionEntropyAccumulator

NEURON_STATS = ("dead_neuron_frac", "stable_rank_mlp_out")
"""Importance statistics that read the MLP neurons (the mlp_post tap) or the down projection's weights."""


@dataclass(frozen=True)
class StatPlan:
    """What --stats asked for (the rows written) and what must be computed for it (plus dependencies)."""

    asked: tuple[str, ...]
    alignment: tuple[str, ...]
    importance: tuple[str, ...]
    attention: tuple[str, ...] = ()
    """Statistics of the attention weights (stats/attention.py), streamed with the alignment ones."""


def plan_stats(spec: str) -> StatPlan:
    """Resolve set and statistic names (statistic_names.py; ProbeOptions checked them at start-up)."""
    asked = asked_statistics(spec)
    computed = list(asked)
    for s in asked:  # spearman_<proxy> needs its proxy and the ablation target
        if s.startswith("spearman_"):
            computed += [d for d in imp.spearman_parts(s) if d not in computed]
    return StatPlan(
        tuple(asked),
        tuple(s for s in ALIGNMENT if s in computed),
        tuple(s for s in STATISTICS if s in computed and s not in imp.AGREEMENT),
        tuple(s for s in ATTENTION if s in computed),
    )


RESIDENT = frozenset({"grad", "grad_per_sequence"})
"""Needs (statistic_names.STATISTICS rows) that read or differentiate the weights themselves."""


def check_dispatch(opts: ProbeOptions, plan: StatPlan) -> None:
    """Under --device-map, refuse (before loading) the statistics that need every weight resident: an
    offloaded block's weights are swapped in for its forward only (gradients, and statistics of the
    weights themselves, would read placeholders)."""
    needs = {s: STATISTICS.get(s).needs for s in plan.importance}
    resident = [s for s, need in needs.items() if not need or need & RESIDENT]
    if opts.device_map and resident:
        raise UserError(f"{', '.join(resident)} need(s) every weight resident, which --device-map does not "
                        "keep; probe them without --device-map")


def refuse_missing_pieces(pm: ProbeModel, plan: StatPlan, backend: str) -> tuple[StatPlan, dict]:
    """Drop the statistics this block kind cannot give (no MLP: only block-level ones; no attention: no
    attention statistics), with the reason; a UserError if nothing asked is left."""
    missing = unavailable(pm.block_kind, {s: ALIGNMENT[s][0] for s in plan.alignment})
    no_pattern = pattern_refusal(pm, backend) if plan.attention else None
    if no_pattern:
        missing |= {s: no_pattern for s in plan.attention}
    if pm.adapter.mlp is None:  # importance statistics of the MLP (ablations, gradients, neurons)
        missing |= {s: NO_MLP for s in plan.importance if "mlp" in s or s in NEURON_STATS}
    if pm.adapter.importance_refusal:  # the row says why the second pass is not offered (T5's decoder)
        missing |= {s: pm.adapter.importance_refusal for s in plan.importance}
    if not missing:
        return plan, {}
    if set(plan.asked) <= set(missing) | {s for s in plan.asked if s.startswith("spearman_")}:
        why = "; ".join(sorted(set(missing.values())))
        raise UserError(f"none of the asked statistics can be computed on this {pm.family} model: {why}")
    kept = replace(
        plan,
        alignment=tuple(s for s in plan.alignment if s not in missing),
        importance=tuple(s for s in plan.importance if s not in missing),
        attention=tuple(s for s in plan.attention if s not in missing),
    )
    return kept, {s: why for s, why in missing.items() if s in plan.asked}


def stream_accumulators_for(pm: ProbeModel, plan: StatPlan, backend: str, say_refused: bool):
    """(the plan this model can give, what was refused and why, the stream's accumulators); the refusals
    are said once (provenance["refused"] keeps them)."""
    plan, refused = refuse_missing_pieces(pm, plan, backend)
    if refused and say_refused:
        _say_refused(pm, refused)
    accs = build_accumulators(plan.alignment, pm.n_layers, pm.d_ff)
    accs += [AttentionEntropyAccumulator(pm.n_layers, pm.d_ff)] if plan.attention else []
    return plan, refused, accs


def _say_refused(pm: ProbeModel, refused: dict[str, str]) -> None:
    """One line per reason: which asked statistics this model gets no rows of, and why."""
    by_reason: dict[str, list[str]] = {}
    for stat, why in refused.items():
        by_reason.setdefault(why, []).append(stat)
    for why, stats in by_reason.items():
        say(f"no rows of {', '.join(stats)} for this {pm.family} model: {why}")
