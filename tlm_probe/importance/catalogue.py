"""Every importance statistic: what it needs from the passes, where it cannot be computed, its CI method.

probe/engine.py reads this table to validate `--stats` names before loading a model, to run only the
passes the asked statistics need, and to write the reasons and CI methods into provenance.
"""

from __future__ import annotations

from tlm_probe.importance.streaming import CI_CLUSTERED

# the names live in statistic_names.py (read at start-up, without torch); re-exported beside the table
from tlm_probe.statistic_names import ABLATION_STATS, GRADIENT_STATS, IMPORTANCE, LENS_STATS
from tlm_probe.statistic_names import AGREEMENT as AGREEMENT
from tlm_probe.statistic_names import DEFAULT_ABLATIONS as DEFAULT_ABLATIONS
from tlm_probe.statistic_names import MATRICES as MATRICES
from tlm_probe.statistic_names import PER_LAYER as PER_LAYER
from tlm_probe.statistic_names import TARGETS as TARGETS
from tlm_probe.statistic_names import spearman_parts as spearman_parts

STATISTICS = IMPORTANCE

# statistic -> what it needs: first-pass parts (lens, angular, angular_last, anisotropy, sample, labels,
# neurons, calib), "ablation", "grad" (summed gradient), "grad_per_sequence" (Fisher); () = weights only
NEEDS: dict[str, frozenset[str]] = {
    **{s: frozenset({"lens"}) for s in LENS_STATS},
    **{
        s: frozenset({"ablation"} | ({"calib"} if "_mean" in s or "_resample" in s else set()))
        for s in ABLATION_STATS
    },
    "taylor_mlp": frozenset({"grad"}),
    "grad_norm_mlp": frozenset({"grad"}),
    "fisher_mlp": frozenset({"grad", "grad_per_sequence"}),
    "effective_rank": frozenset({"sample"}),
    "participation_ratio": frozenset({"sample"}),
    "cka_linear": frozenset({"sample"}),
    "probe_acc": frozenset({"sample", "labels"}),
    "anisotropy": frozenset({"anisotropy"}),
    "dead_neuron_frac": frozenset({"neurons"}),
    "stable_rank_mlp_out": frozenset(),
    "angular_distance": frozenset({"angular"}),
    "drop_block_best": frozenset({"angular"}),
    "angular_distance_last": frozenset({"angular_last"}),
    "drop_block_best_last": frozenset({"angular_last"}),
}
FIRST_PASS = frozenset(
    {"lens", "angular", "angular_last", "anisotropy", "sample", "labels", "neurons", "calib"}
)

NO_LM = "encoder without a causal LM head: no next-token distribution or loss"
HAS_LM = "causal LM: its ablation effect is the NLL increase, ablation_dnll_*"
NEEDS_LM = (*LENS_STATS, *GRADIENT_STATS, *(s for s in ABLATION_STATS if s.startswith("ablation_dnll_")))
NEEDS_ENCODER = tuple(s for s in ABLATION_STATS if s.startswith("ablation_shift_"))
# a seeded sample (or pool) drawn per rank is not the sample one process draws: refused under torchrun
SAMPLED = (
    "effective_rank",
    "participation_ratio",
    "cka_linear",
    "probe_acc",
    "ablation_dnll_mlp_resample",
    "ablation_shift_mlp_resample",
)
PER_RANK = "uses a seeded token sample that differs per rank under torchrun; run it in one process"

CI_METHODS = {
    "alignment (align_*, *_influence, norm_ratio_mlp, resid_norm_growth)": CI_CLUSTERED,
    "logit_lens_*, ablation_*": CI_CLUSTERED,
    "fisher_mlp": CI_CLUSTERED + " (one value per sequence)",
    "probe_acc": CI_CLUSTERED + " (held-out sampled tokens, clustered by their sequence)",
    "spearman_*": "Fisher-z with Bonett-Wright variance, 95% (n = layers)",
    "taylor_mlp, grad_norm_mlp, effective_rank, participation_ratio, anisotropy, dead_neuron_frac, "
    "stable_rank_mlp_out": "none (not a mean over tokens): NaN",
}


def reasons(stats: list[str], causal: bool, world: int) -> dict[str, str]:
    """statistic -> why it cannot be computed on this model / in this run (absent if it can)."""
    out = {}
    for s in stats:
        if s in NEEDS_LM and not causal:
            out[s] = NO_LM
        elif s in NEEDS_ENCODER and causal:
            out[s] = HAS_LM
        elif s in SAMPLED and world > 1:
            out[s] = PER_RANK
    return out


def needs(stats: list[str]) -> frozenset[str]:
    return frozenset().union(*(NEEDS.get(s, frozenset()) for s in stats))
