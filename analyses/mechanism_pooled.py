"""Does MLP-residual alignment rise with relative depth across the real pretrained models? (issue 48)

    python -m analyses.mechanism_pooled    # results/mechanism/{profiles,pooled}.csv + real_models.md

Reads only the committed tables results/mechanism/<model>/<corpus>/results.csv. Per model, corpus and
reading: Spearman ρ of the per-layer means with depth; its p-value, exact over all layer orders for up to 8
layers; a 95% CI by Fisher z with the Bonett-Wright variance (1 + ρ²/2)/(n − 3) over the n layers (ρ capped
at ±0.99 for the CI only: a 5-layer ρ of 1 has an infinite z).

Pooled over the six models, per corpus and reading: the layer-weighted mean ρ̄ = Σ(n_i − 1)ρ_i / Σ(n_i − 1)
(under "no order with depth" Spearman's ρ has variance 1/(n − 1), so this weights each model by the
information its layers carry, and is the most powerful combination against a common ρ); its one-sided p
for "rises" by a stratified permutation test (layer order shuffled within each model, PERMUTATIONS draws);
its power: the chance this test rejects at α = 0.05 if every model's true ρ were 0.3, 0.5 or 0.7, from the
null's normal approximation (variance 1/Σ(n_i − 1)). The equal-weight mean ρ and its permutation p are
given beside it. A layer mean is measured to ±0.04 or better (its CI over sequences), so ρ's uncertainty
is that of few layers, not of few tokens: a 5-layer model gives one ρ from 5 points whatever the tokens.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

RESULTS = Path(__file__).resolve().parent / "results" / "mechanism"
MODELS = ("smollm2", "gemma3-270m", "minilm", "stories260k", "babyllama", "llama2xs")
CORPORA = ("tinystories", "builtin")
READINGS = ("align_mlp_pre", "align_mlp_mid", "align_mlp_post")
PERMUTATIONS = 20000
ALPHA = 0.05
POWER_AT = (0.3, 0.5, 0.7)


def reading(model: str, corpus: str, stat: str, root: Path = RESULTS) -> pd.DataFrame:
    df = pd.read_csv(root / model / corpus / "results.csv")
    return df[df.statistic == stat].sort_values("layer").reset_index(drop=True)


def exact_p(values: np.ndarray) -> float:
    """Two-sided p of Spearman's ρ with depth: exact over every layer order up to 8 layers, else scipy's."""
    n = len(values)
    rho = stats.spearmanr(np.arange(n), values)[0]
    if n > 8:
        return float(stats.spearmanr(np.arange(n), values)[1])
    r = stats.rankdata(values)
    null = [stats.spearmanr(np.arange(n), np.asarray(p))[0] for p in itertools.permutations(r)]
    return float(np.mean(np.abs(null) >= abs(rho) - 1e-12))


def spearman_ci(rho: float, n: int) -> tuple[float, float]:
    capped = float(np.clip(rho, -0.99, 0.99))
    half = stats.norm.ppf(0.975) * np.sqrt((1 + capped ** 2 / 2) / (n - 3))
    z = np.arctanh(capped)
    return float(np.tanh(z - half)), float(np.tanh(z + half))


def profile_rows(root: Path = RESULTS) -> pd.DataFrame:
    rows = []
    for model in MODELS:
        for corpus in CORPORA:
            if not (root / model / corpus / "results.csv").is_file():
                continue
            for stat in READINGS:
                v = reading(model, corpus, stat, root)
                rho = float(stats.spearmanr(v.depth, v.value)[0])
                lo, hi = spearman_ci(rho, len(v))
                rows.append(dict(model=model, corpus=corpus, statistic=stat, n_layers=len(v), rho=rho,
                                 ci_low=lo, ci_high=hi, p_two_sided=exact_p(v.value.to_numpy()),
                                 first=v.value.iloc[0], last=v.value.iloc[-1], min=v.value.min(),
                                 max=v.value.max(), widest_layer_ci=float((v.ci_high - v.ci_low).max()),
                                 n_tokens=int(v.n_tokens.iloc[0])))
    return pd.DataFrame(rows)


def permutation_p(values: list[np.ndarray], weights: np.ndarray, seed: int = 0) -> float:
    """One-sided p of the weighted mean Spearman ρ under layer orders shuffled within each model."""
    rng = np.random.default_rng(seed)
    observed, null = 0.0, np.zeros(PERMUTATIONS)
    for v, w in zip(values, weights, strict=True):
        r = stats.rankdata(v) - (len(v) + 1) / 2
        depth = np.arange(len(v)) - (len(v) - 1) / 2
        scale = w / (np.linalg.norm(r) * np.linalg.norm(depth))
        observed += scale * (r @ depth)
        null += scale * (rng.permuted(np.tile(r, (PERMUTATIONS, 1)), axis=1) @ depth)
    return float((1 + np.sum(null >= observed - 1e-12)) / (1 + PERMUTATIONS))


def power(ns: list[int], rho: float) -> float:
    info = sum(n - 1 for n in ns)
    return float(stats.norm.sf(stats.norm.ppf(1 - ALPHA) - rho * np.sqrt(info)))


def pooled_rows(profiles: pd.DataFrame, root: Path = RESULTS) -> pd.DataFrame:
    rows = []
    for (corpus, stat), g in profiles.groupby(["corpus", "statistic"], sort=False):
        if len(g) < len(MODELS):
            continue
        values = [reading(m, corpus, stat, root).value.to_numpy() for m in g.model]
        w = (g.n_layers.to_numpy() - 1) / (g.n_layers.to_numpy() - 1).sum()
        equal = np.full(len(g), 1 / len(g))
        row = dict(corpus=corpus, statistic=stat, models=len(g), layers=int(g.n_layers.sum()),
                   weighted_mean_rho=float(w @ g.rho), p_rises_weighted=permutation_p(values, w),
                   mean_rho=float(g.rho.mean()), p_rises_equal=permutation_p(values, equal),
                   models_rising=int(((g.p_two_sided < 0.05) & (g.rho > 0)).sum()),
                   models_falling=int(((g.p_two_sided < 0.05) & (g.rho < 0)).sum()))
        row.update({f"power_at_rho_{r}": power(list(g.n_layers), r) for r in POWER_AT})
        rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    profiles = profile_rows()
    pooled = pooled_rows(profiles)
    profiles.to_csv(RESULTS / "profiles.csv", index=False)
    pooled.to_csv(RESULTS / "pooled.csv", index=False)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(profiles.round(3).to_string())
        print(pooled.round(4).to_string())


if __name__ == "__main__":
    main()
