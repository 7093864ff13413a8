"""Every statistic `tlm probe --stats` takes and the sets they form, in a module that imports nothing heavy:
ProbeOptions checks --stats against it at start-up, so a typo is refused in the time --help takes, before
torch is imported. The alignment formulas are plain data and live here whole (FORMULAS); each importance
statistic is one StatisticSpec row of STATISTICS (what it needs, its compute function by import path, its
interval, label and range); the passes that make the rows are in importance/."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from tlm_probe.errors import UserError
from tlm_probe.registry import Registry

# name -> (kind, a, b): cos = cos(a, b), |cos| = |cos(a, b)|, 1-cos = 1 - cos(a, b), ratio = |a| / |b|;
# the one table of the alignment statistics (stats/alignment_fast.py computes them, stats/alignment.py is
# the one-by-one reference made from it)
FORMULAS: Registry[tuple[str, str, str]] = Registry("statistic", {
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
})
ALIGNMENT = tuple(FORMULAS)
# per layer, from the attention weights (stats/attention.py): the token mean over query positions of the mean
# over heads of the entropy (nats) of the attention distribution over keys, masked keys left out; streamed
# like the alignment statistics (one pass, nothing stored), on any row with a pattern tap
ATTENTION = ("attn_entropy",)

LENS_STATS = ("logit_lens_kl", "logit_lens_ce", "logit_lens_entropy", "logit_lens_top1")
DEFAULT_ABLATIONS = ("mlp_zero", "mlp_mean", "mlp_resample", "attn_zero", "block_skip")
MATRICES = ("angular_distance", "angular_distance_last", "cka_linear", "drop_block_best",
            "drop_block_best_last")
# the proxies whose Spearman agreement with the ablation effect across layers is measured (agreement.py),
# against the MLP zero-ablation effect: the NLL increase of a causal LM, the output shift of an encoder
PROXIES = ("align_mlp_mid", "align_mlp_pre", "mlp_influence", "block_influence", "norm_ratio_mlp",
           "logit_lens_kl", "taylor_mlp", "fisher_mlp", "grad_norm_mlp", "dead_neuron_frac",
           "stable_rank_mlp_out")
TARGETS = ("ablation_dnll_mlp_zero", "ablation_shift_mlp_zero")
AGREEMENT = tuple(f"spearman_{p}" for p in PROXIES)

INF = float("inf")
KIND_RANGES = {"cos": (-1.0, 1.0), "|cos|": (0.0, 1.0), "1-cos": (0.0, 2.0), "ratio": (0.0, INF)}
CI_CLUSTERED = "t interval over sequences (sequence-clustered ratio estimator), 95%"
NO_CI = "none (not a mean over tokens): NaN"
ALIGNMENT_CI = {"alignment (align_*, *_influence, norm_ratio_mlp, resid_norm_growth)": CI_CLUSTERED}
"""The interval of the alignment (and attention) rows; an importance statistic's is on its row."""


@dataclass(frozen=True, kw_only=True)
class StatisticSpec:
    """One importance statistic (`--stats importance`): everything tlm knows about it apart from its code."""

    needs: frozenset[str] = frozenset()
    """What it needs from the importance passes: first-pass parts (FIRST_PASS), "ablation", "grad" (summed
    gradient), "grad_per_sequence" (Fisher); empty: the weights only."""
    compute: str = ""
    """"package.module:function" (pm, opts, first pass or None) -> {statistic: one row dict per layer (value,
    ci_low, ci_high, std, n_tokens)}, run after the passes; "": its pass makes its rows (lens, ablation,
    gradients), or it is a layer x layer matrix or an agreement (importance/tables.py, agreement.py)."""
    ci: str = NO_CI
    """Its 95% interval (ci_low, ci_high): provenance.json's ci_methods and the docs say it."""
    family: str = ""
    """The rows its interval is stated for in ci_methods ("": a matrix, no interval)."""
    label: str = ""
    """Its readable name with units (figures; "": the name)."""
    range: tuple[float, float] = (-INF, INF)
    """The values it can take: a confidence interval is cut to them."""
    models: str = ""
    """causal (needs a next-token distribution) | encoder (needs no LM head) | "" (any model)."""
    sampled: bool = False
    """It draws a seeded token sample, which differs per rank under torchrun: refused there."""


def _rows(names, **kw) -> dict[str, StatisticSpec]:
    return {name: StatisticSpec(**kw) for name in names}


_LENS = dict(needs=frozenset({"lens"}), ci=CI_CLUSTERED, family="logit_lens_*, ablation_*", models="causal")
_NONE = dict(family="taylor_mlp, grad_norm_mlp, effective_rank, participation_ratio, anisotropy, "
             "dead_neuron_frac, stable_rank_mlp_out", range=(0.0, INF))  # not a mean over tokens: no interval
_GRAD = dict(_NONE, needs=frozenset({"grad"}), models="causal")
_TABLES = "tlm_probe.importance.tables:"
_SAMPLE = dict(_NONE, needs=frozenset({"sample"}), compute=_TABLES + "sample_rows", sampled=True)
_ABLATED = {"mlp_zero": "MLP zeroed", "mlp_mean": "MLP mean-ablated", "mlp_resample": "MLP resampled",
            "attn_zero": "attention zeroed", "block_skip": "block skipped"}


def _ablation(metric: str, a: str) -> StatisticSpec:
    """ablation_dnll_* (NLL increase: causal LMs) or ablation_shift_* (1 - cos of the output: encoders)."""
    calib = {"calib"} if a in ("mlp_mean", "mlp_resample") else set()
    dnll = metric == "dnll"
    label = f"Δ NLL, {_ABLATED[a]} (nats/token)" if dnll else "1 − cos(final, MLP zeroed)" * (a == "mlp_zero")
    return StatisticSpec(needs=frozenset({"ablation"} | calib), ci=CI_CLUSTERED, family=_LENS["family"],
                         label=label, models="causal" if dnll else "encoder", sampled=a == "mlp_resample",
                         range=(-INF, INF) if dnll else KIND_RANGES["1-cos"])


STATISTICS: Registry[StatisticSpec] = Registry("statistic", {
    "logit_lens_kl": StatisticSpec(**_LENS, label="logit-lens KL(final ‖ lens) (nats)", range=(0.0, INF)),
    "logit_lens_ce": StatisticSpec(**_LENS, label="logit-lens cross-entropy (nats/token)", range=(0.0, INF)),
    "logit_lens_entropy": StatisticSpec(**_LENS, label="logit-lens entropy (nats)", range=(0.0, INF)),
    "logit_lens_top1": StatisticSpec(**_LENS, label="logit-lens top-1 = final top-1 (fraction)",
                                     range=(0.0, 1.0)),
    **{f"ablation_{m}_{a}": _ablation(m, a) for m in ("dnll", "shift") for a in DEFAULT_ABLATIONS},
    "taylor_mlp": StatisticSpec(**_GRAD, label="|θ·∇L| of the MLP (nats)"),
    "fisher_mlp": StatisticSpec(**dict(_GRAD, needs=frozenset({"grad", "grad_per_sequence"}),
                                       family="fisher_mlp"), ci=CI_CLUSTERED + " (one value per sequence)",
                                label="Fisher trace of the MLP"),
    "grad_norm_mlp": StatisticSpec(**_GRAD, label="‖∇L‖ of the MLP parameters"),
    **_rows(("effective_rank", "participation_ratio"), **_SAMPLE),
    "anisotropy": StatisticSpec(**dict(_NONE, range=(-INF, INF)), needs=frozenset({"anisotropy"}),
                                compute=_TABLES + "anisotropy_rows"),
    "dead_neuron_frac": StatisticSpec(**dict(_NONE, range=(0.0, 1.0)), needs=frozenset({"neurons"}),
                                      compute=_TABLES + "neuron_rows",
                                      label="rarely active neurons (fraction)"),
    "stable_rank_mlp_out": StatisticSpec(**_NONE, compute=_TABLES + "stable_rank_rows"),
    "probe_acc": StatisticSpec(**dict(_SAMPLE, range=(0.0, 1.0), needs=frozenset({"sample", "labels"}),
                                      compute=_TABLES + "probe_rows", family="probe_acc"),
                               ci=CI_CLUSTERED + " (held-out sampled tokens, clustered by their sequence)",
                               label="linear probe accuracy (fraction)"),
    "angular_distance": StatisticSpec(needs=frozenset({"angular"}), label="arccos(cos)/π (0–1)"),
    "angular_distance_last": StatisticSpec(needs=frozenset({"angular_last"}),
                                           label="arccos(cos)/π, last token (0–1)"),
    "cka_linear": StatisticSpec(needs=frozenset({"sample"}), label="linear CKA (0–1)", sampled=True),
    "drop_block_best": StatisticSpec(needs=frozenset({"angular"})),
    "drop_block_best_last": StatisticSpec(needs=frozenset({"angular_last"})),
    **_rows(AGREEMENT, ci="Fisher-z with Bonett-Wright variance, 95% (n = layers)", family="spearman_*"),
})
"""Every importance statistic -> its row, in the order of the result tables; a new one is one row (a
`STATISTICS.register(name, StatisticSpec(...))` call) with its compute function."""
FIRST_PASS = frozenset(
    {"lens", "angular", "angular_last", "anisotropy", "sample", "labels", "neurons", "calib"})
WHY_NOT = {"causal": "encoder without a causal LM head: no next-token distribution or loss",
           "encoder": "causal LM: its ablation effect is the NLL increase, ablation_dnll_*",
           "sampled": "uses a seeded token sample that differs per rank under torchrun; run it in one "
                      "process"}


def sets() -> dict[str, tuple[str, ...]]:
    """The --stats sets: alignment, attention, importance (every STATISTICS row, registered ones too), all."""
    out = {"alignment": tuple(FORMULAS), "attention": ATTENTION, "importance": tuple(STATISTICS)}
    return {**out, "all": sum(out.values(), ())}


def ci_methods() -> dict[str, str]:
    """Rows -> their 95% interval method (provenance.json's ci_methods, the docs)."""
    return {**ALIGNMENT_CI, **{r.family: r.ci for r in STATISTICS.values() if r.family}}


def needs(stats: list[str]) -> frozenset[str]:
    return frozenset().union(*(STATISTICS.get(s).needs for s in stats if s in STATISTICS))


def _why_not(row: StatisticSpec, causal: bool, world: int) -> str:
    if row.models == ("encoder" if causal else "causal"):
        return WHY_NOT[row.models]
    return WHY_NOT["sampled"] if row.sampled and world > 1 else ""


def reasons(stats: list[str], causal: bool, world: int) -> dict[str, str]:
    """statistic -> why it cannot be computed on this model / in this run (absent if it can)."""
    why = {s: _why_not(STATISTICS.get(s), causal, world) for s in stats if s in STATISTICS}
    return {s: text for s, text in why.items() if text}


def value_range(statistic: str) -> tuple[float, float]:
    """The values a statistic can take: a confidence interval is cut to them (a mean of non-negative values
    has no interval below 0). An NLL difference may take any value."""
    if statistic in FORMULAS:
        return KIND_RANGES[FORMULAS[statistic][0]]
    if statistic in ATTENTION:  # an entropy
        return (0.0, INF)
    return STATISTICS.get(statistic).range if statistic in STATISTICS else (-INF, INF)


def spearman_parts(stat: str) -> tuple[str, ...]:
    """spearman_<proxy> needs the proxy and the ablation target (both metrics: the model picks one)."""
    return (stat.removeprefix("spearman_"), *TARGETS)


def asked_statistics(spec: str) -> tuple[str, ...]:
    """--stats (set and statistic names, comma separated) -> the statistics asked, in order, once each;
    an unknown name is a UserError line with the closest names."""
    asked: list[str] = []
    named = sets()
    for item in (s.strip() for s in str(spec).split(",") if s.strip()):
        if item not in named and item not in named["all"]:
            close = difflib.get_close_matches(item, [*named, *named["all"]], n=3)
            names = f"did you mean {' or '.join(close)}?" if close else f"names: {', '.join(named['all'])}"
            raise UserError(f"unknown statistic {item!r}; the sets are {', '.join(named)}; {names}")
        asked += [s for s in named.get(item, (item,)) if s not in asked]
    if not asked:
        raise UserError(f"--stats {spec!r} names no statistics")
    return tuple(asked)
