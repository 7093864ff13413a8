"""The docs' mechanism section on real pretrained models, written from the committed tables alone
(profiles.csv, pooled.csv, quantization.csv, sources.json); tests/test_mechanism_real_models.py recomputes
every number in it from the per-model results.csv files.

    python -m analyses.mechanism_real_section    # -> results/mechanism/real_models.md
"""

from __future__ import annotations

import json

import pandas as pd

from analyses.mechanism_pooled import MODELS, POWER_AT, RESULTS

PRIMARY = "align_mlp_mid"
LABEL = {"smollm2": "SmolLM2-135M-Instruct", "gemma3-270m": "Gemma 3 270M", "minilm": "all-MiniLM-L6-v2",
         "stories260k": "stories260K", "babyllama": "BabyLlama (tok105)", "llama2xs": "llama2xs"}


def model_table(sources: dict) -> list[str]:
    lines = ["| model | precision | shape | from |", "|---|---|---|---|"]
    for m in MODELS:
        s = sources["models"][m]
        lines.append(f"| {LABEL[m]} | {s['precision']} | {s['shape']} | {s['source']} |")
    return lines


def rho_cell(r: pd.Series) -> str:
    return f"{r.rho:+.2f} [{r.ci_low:+.2f}, {r.ci_high:+.2f}] p={r.p_two_sided:.2g}"


def profile_table(profiles: pd.DataFrame) -> list[str]:
    lines = ["| model | corpus | layers | align_mlp_pre ρ [95% CI] | align_mlp_mid ρ [95% CI] | "
             "align_mlp_post ρ [95% CI] | align_mlp_mid first → last layer |",
             "|---|---|---|---|---|---|---|"]
    for (model, corpus), g in profiles.groupby(["model", "corpus"], sort=False):
        by = g.set_index("statistic")
        mid = by.loc[PRIMARY]
        cells = [rho_cell(by.loc[s]) for s in ("align_mlp_pre", PRIMARY, "align_mlp_post")]
        lines.append(f"| {LABEL[model]} | {corpus} | {int(mid.n_layers)} | {' | '.join(cells)} | "
                     f"{mid['first']:+.2f} → {mid['last']:+.2f} |")
    return lines


def pooled_table(pooled: pd.DataFrame) -> list[str]:
    power_cols = " | ".join(f"power at ρ={r}" for r in POWER_AT)
    lines = [f"| corpus | reading | layer-weighted mean ρ | p (rises) | equal-weight mean ρ | p (rises) | "
             f"models rising / falling (p<0.05) | {power_cols} |", "|---|---|---|---|---|---|---|" +
             "---|" * len(POWER_AT)]
    for _, r in pooled.iterrows():
        power = " | ".join(f"{r[f'power_at_rho_{x}']:.2f}" for x in POWER_AT)
        lines.append(f"| {r.corpus} | {r.statistic} | {r.weighted_mean_rho:+.2f} | "
                     f"{r.p_rises_weighted:.3g} | {r.mean_rho:+.2f} | {r.p_rises_equal:.3g} | "
                     f"{r.models_rising} / {r.models_falling} | {power} |")
    return lines


def quant_bounds(quant: pd.DataFrame) -> pd.DataFrame:
    """Per type: the largest |Δ| over models, readings and layers, and the largest change of ρ."""
    q = quant.assign(rho_change=(quant.rho_quant - quant.rho_full).abs())
    return q.groupby("quant", sort=False).agg(max_abs_delta=("abs_delta", "max"),
                                              max_rho_change=("rho_change", "max"))


def quant_table(quant: pd.DataFrame) -> list[str]:
    lines = ["| model | type | largest |Δ| align_mlp_pre / mid / post | ρ(mid) fp32 → quantized |",
             "|---|---|---|---|"]
    for (model, mix), g in quant.groupby(["model", "quant"], sort=False):
        by = g.groupby("statistic").abs_delta.max()
        mid = g[g.statistic == PRIMARY].iloc[0]
        deltas = " / ".join(f"{by[s]:.3f}" for s in ("align_mlp_pre", PRIMARY, "align_mlp_post"))
        lines.append(f"| {LABEL.get(model, model)} | {mix} | {deltas} | {mid.rho_full:+.2f} → "
                     f"{mid.rho_quant:+.2f} |")
    return lines


def main() -> None:
    sources = json.loads((RESULTS / "sources.json").read_text())
    profiles = pd.read_csv(RESULTS / "profiles.csv")
    pooled = pd.read_csv(RESULTS / "pooled.csv")
    quant = pd.read_csv(RESULTS / "quantization.csv")
    bounds = quant_bounds(quant)
    bound = "; ".join(f"{t}: |Δ| ≤ {b.max_abs_delta:.3f}, |Δρ| ≤ {b.max_rho_change:.2f}"
                      for t, b in bounds.iterrows())
    parts = ["### Models measured", *model_table(sources), "",
             "### Each model's profile: Spearman ρ of the per-layer mean alignment with depth",
             *profile_table(profiles), "",
             "### Pooled test: does alignment rise with relative depth?", *pooled_table(pooled), "",
             "### What quantization puts on the statistic (the full-precision probe's tokens: the "
             "TinyStories sample; builtin:pydoc for the two study models trained here)",
             *quant_table(quant), "", f"Bound per type (largest over models, readings and layers): {bound}"]
    (RESULTS / "real_models.md").write_text("\n".join(parts) + "\n")
    print("\n".join(parts))


if __name__ == "__main__":
    main()
