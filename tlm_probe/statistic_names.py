"""The name of every statistic `tlm probe --stats` takes and the sets they form, in a module that imports
nothing heavy: ProbeOptions checks --stats against it at start-up, so a typo is refused in the time --help
takes, before torch is imported. The alignment formulas are plain data and live here whole (FORMULAS);
what each importance statistic needs and how it is computed stay with its code (importance/catalogue.py and
the modules it names), keyed by the names below."""

from __future__ import annotations

import difflib

from tlm_probe.errors import UserError

# name -> (kind, a, b): cos = cos(a, b), |cos| = |cos(a, b)|, 1-cos = 1 - cos(a, b), ratio = |a| / |b|;
# the one table of the alignment statistics (stats/alignment_fast.py computes them, stats/alignment.py is
# the one-by-one reference made from it)
FORMULAS = {
    "align_mlp_mid": ("cos", "mlp_out", "resid_mid"),
    "align_mlp_pre": ("cos", "mlp_out", "resid_pre"),
    "align_abs_mlp_mid": ("|cos|", "mlp_out", "resid_mid"),
    "align_abs_mlp_pre": ("|cos|", "mlp_out", "resid_pre"),
    # against the stream after the MLP's own write: the third reading of "aligned with the residual
    # stream" (it includes mlp_out itself, so it is >= align_mlp_mid whenever the MLP writes along it)
    "align_mlp_post": ("cos", "mlp_out", "resid_post"),
    "align_attn_pre": ("cos", "attn_out", "resid_pre"),
    "norm_ratio_mlp": ("ratio", "mlp_out", "resid_mid"),
    "block_influence": ("1-cos", "resid_pre", "resid_post"),
    "mlp_influence": ("1-cos", "resid_mid", "resid_post"),
    "attn_influence": ("1-cos", "resid_pre", "resid_mid"),
    "resid_norm_growth": ("ratio", "resid_post", "resid_pre"),
}
ALIGNMENT = tuple(FORMULAS)
# per layer, from the attention weights (stats/attention.py): the token mean over query positions of the mean
# over heads of the entropy (nats) of the attention distribution over keys, masked keys left out; streamed
# like the alignment statistics (one pass, nothing stored), on any row with a pattern tap
ATTENTION = ("attn_entropy",)

LENS_STATS = ("logit_lens_kl", "logit_lens_ce", "logit_lens_entropy", "logit_lens_top1")
DEFAULT_ABLATIONS = ("mlp_zero", "mlp_mean", "mlp_resample", "attn_zero", "block_skip")
GRADIENT_STATS = ("taylor_mlp", "fisher_mlp", "grad_norm_mlp")
ABLATION_STATS = tuple(f"ablation_{m}_{a}" for m in ("dnll", "shift") for a in DEFAULT_ABLATIONS)
PER_LAYER = (
    *LENS_STATS,
    *ABLATION_STATS,
    *GRADIENT_STATS,
    "effective_rank",
    "participation_ratio",
    "anisotropy",
    "dead_neuron_frac",
    "stable_rank_mlp_out",
    "probe_acc",
)
MATRICES = (
    "angular_distance",
    "angular_distance_last",
    "cka_linear",
    "drop_block_best",
    "drop_block_best_last",
)
# the proxies whose Spearman agreement with the ablation effect across layers is measured (agreement.py),
# against the MLP zero-ablation effect: the NLL increase of a causal LM, the output shift of an encoder
PROXIES = (
    "align_mlp_mid",
    "align_mlp_pre",
    "mlp_influence",
    "block_influence",
    "norm_ratio_mlp",
    "logit_lens_kl",
    "taylor_mlp",
    "fisher_mlp",
    "grad_norm_mlp",
    "dead_neuron_frac",
    "stable_rank_mlp_out",
)
TARGETS = ("ablation_dnll_mlp_zero", "ablation_shift_mlp_zero")
AGREEMENT = tuple(f"spearman_{p}" for p in PROXIES)
IMPORTANCE = PER_LAYER + MATRICES + AGREEMENT

SETS = {
    "alignment": ALIGNMENT,
    "attention": ATTENTION,
    "importance": IMPORTANCE,
    "all": ALIGNMENT + ATTENTION + IMPORTANCE,
}


INF = float("inf")
KIND_RANGES = {"cos": (-1.0, 1.0), "|cos|": (0.0, 1.0), "1-cos": (0.0, 2.0), "ratio": (0.0, INF)}
NON_NEGATIVE = ("attn_entropy", "logit_lens_kl", "logit_lens_ce", "logit_lens_entropy", *GRADIENT_STATS,
                "effective_rank", "participation_ratio", "stable_rank_mlp_out")
FRACTIONS = ("logit_lens_top1", "dead_neuron_frac", "probe_acc")
VALUE_RANGES: dict[str, tuple[float, float]] = {
    **{name: KIND_RANGES[kind] for name, (kind, _, _) in FORMULAS.items()},
    **dict.fromkeys(NON_NEGATIVE, (0.0, INF)),
    **dict.fromkeys(FRACTIONS, (0.0, 1.0)),
    **{f"ablation_shift_{a}": KIND_RANGES["1-cos"] for a in DEFAULT_ABLATIONS},
}
"""The values a statistic can take: a confidence interval is cut to them (a mean of non-negative values has
no interval below 0). Statistics not listed (an NLL difference) may take any value."""


def value_range(statistic: str) -> tuple[float, float]:
    return VALUE_RANGES.get(statistic, (-INF, INF))


def spearman_parts(stat: str) -> tuple[str, ...]:
    """spearman_<proxy> needs the proxy and the ablation target (both metrics: the model picks one)."""
    return (stat.removeprefix("spearman_"), *TARGETS)


def asked_statistics(spec: str) -> tuple[str, ...]:
    """--stats (set and statistic names, comma separated) -> the statistics asked, in order, once each;
    an unknown name is a UserError line with the closest names."""
    asked: list[str] = []
    for item in (s.strip() for s in str(spec).split(",") if s.strip()):
        if item not in SETS and item not in SETS["all"]:
            close = difflib.get_close_matches(item, [*SETS, *SETS["all"]], n=3)
            names = f"did you mean {' or '.join(close)}?" if close else f"names: {', '.join(SETS['all'])}"
            raise UserError(f"unknown statistic {item!r}; the sets are {', '.join(SETS)}; {names}")
        asked += [s for s in SETS.get(item, (item,)) if s not in asked]
    if not asked:
        raise UserError(f"--stats {spec!r} names no statistics")
    return tuple(asked)
