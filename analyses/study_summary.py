"""The study's numbers as Markdown (analyses/results/summary.md), made from the committed tables only.

Training parts: per arm, mean ± std of the validation loss over seeds and the paired difference to the
uniform arm of the same mixer (mean, 95% t-interval, d_z, p; uncorrected for the number of arms, and the
Holm-adjusted p beside it). Evaluation: each task metric per arm, paired against uniform the same way.
Mechanism: for every probed model, the MLP-residual cosine by layer and Spearman's rank correlation of it
with depth, with the verdict that follows from it ("rises", "falls" or "no monotone trend" at p < 0.05).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from tlm_probe.train.compare_tables import holm

MECHANISM_STATS = ("align_mlp_mid", "align_abs_mlp_mid", "align_mlp_pre", "align_abs_mlp_pre")


def _fmt(x: float, spec: str = "+.4f") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def training_table(folder: Path) -> str:
    summary = pd.read_csv(folder / "summary.csv").set_index("arm")
    has_pairs = (folder / "paired.csv").stat().st_size > 1
    paired = pd.read_csv(folder / "paired.csv").set_index("arm") if has_pairs else pd.DataFrame()
    if len(paired):
        paired["p_holm"] = _holm_over_arms(paired, "val_loss")
    lines = ["| arm | seeds | val loss (mean ± std) | val ppl | Δ loss vs uniform [95% CI] | d_z | p | "
             "p (Holm) |", "|---|---|---|---|---|---|---|---|"]
    for arm, s in summary.iterrows():
        lines.append("| " + " | ".join(_training_row(arm, s, paired)) + " |")
    return "\n".join(lines)


def _holm_over_arms(paired: pd.DataFrame, metric: str) -> pd.Series:
    """Holm-adjusted p of `metric` over every arm of the part: the study's family (in `mixers`, the four
    mixers' tapers together), not compare's per-baseline family (paired_table's `<metric>_p_holm`, which
    for one taper per mixer is the raw p)."""
    return holm(paired[f"{metric}_p"])


def _training_row(arm: str, s: pd.Series, paired: pd.DataFrame) -> list[str]:
    cells = [arm, str(s.n_seeds), f"{s.val_loss_mean:.4f} ± {_fmt(s.val_loss_std, '.4f')}",
             f"{s.val_ppl_mean:.1f}"]
    if arm not in paired.index:
        return [*cells, "(baseline)", "", "", ""]
    p = paired.loc[arm]
    ci = f"[{_fmt(p.val_loss_diff_ci_low)}, {_fmt(p.val_loss_diff_ci_high)}]"
    return [*cells, f"{p.val_loss_diff_mean:+.4f} {ci}", _fmt(p.val_loss_dz, "+.2f"),
            _fmt(p.val_loss_p, ".3g"), _fmt(p.p_holm, ".3g")]


def eval_table(eval_root: Path, folder: Path) -> str:
    """Per arm of the comparison in `folder`: mean of each task metric over seeds, and its paired difference
    to the uniform arm of the same mixer (compare's own paired_table, as for the validation loss), with the
    p-value Holm-adjusted over the arms (per metric)."""
    from tlm_probe.train.compare_tables import paired_table, summary_table

    rows = []
    for res in sorted((eval_root / folder.name).glob("*/results.csv")):
        arm, seed = res.parent.name.rsplit("-s", 1)
        df = pd.read_csv(res)
        rows.append({"arm": arm, "seed": int(seed), **dict(zip(df["task"] + " " + df["metric"], df["value"],
                                                                strict=True))})
    if not rows:
        return ""
    evals = pd.DataFrame(rows)
    keys = tuple(c for c in evals.columns if c not in ("arm", "seed"))
    runs = pd.read_csv(folder / "results.csv").drop(columns=["val_loss", "val_ppl", "val_bpb"])
    table = runs.merge(evals, on=["arm", "seed"])
    summary = summary_table(table, keys).set_index("arm")
    baseline = json.loads((folder / "compare.json").read_text())["baseline"]
    paired = paired_table(table, baseline, keys)
    paired = paired.set_index("arm") if len(paired) else paired
    for k in keys if len(paired) else ():
        paired[f"{k}_p_holm_arms"] = _holm_over_arms(paired, k)
    lines = ["| arm | seeds | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
    for arm, s in summary.iterrows():
        cells = [arm, str(s.n_seeds)]
        for k in keys:
            cell = f"{s[f'{k}_mean']:.4g}"
            if arm in paired.index:
                p = paired.loc[arm]
                cell += (f" (Δ {p[f'{k}_diff_mean']:+.3g}, p {_fmt(p[f'{k}_p'], '.2g')}, "
                         f"Holm {_fmt(p[f'{k}_p_holm_arms'], '.2g')})")
            cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def trend(values: np.ndarray) -> tuple[float, float, str]:
    """Spearman rho of a per-layer statistic with depth, its p-value, and what it says."""
    rho, p = stats.spearmanr(np.arange(len(values)), values)
    if p < 0.05:
        return rho, p, "rises with depth" if rho > 0 else "falls with depth"
    return rho, p, "no monotone trend with depth (p ≥ 0.05)"


def mechanism_table(root: Path) -> str:
    lines = ["| model | statistic | by layer (first → last) | Spearman ρ with depth | p | verdict |",
             "|---|---|---|---|---|---|"]
    for res in sorted(root.rglob("results.csv")):
        df = pd.read_csv(res)
        name = str(res.parent.relative_to(root))
        for stat in MECHANISM_STATS:
            v = df[df.statistic == stat].sort_values("layer")["value"].to_numpy(float)
            if len(v) < 3:
                continue
            rho, p, verdict = trend(v)
            shown = ", ".join(f"{x:+.2f}" for x in v) if len(v) <= 12 else \
                ", ".join(f"{x:+.2f}" for x in v[:5]) + ", …, " + ", ".join(f"{x:+.2f}" for x in v[-3:])
            lines.append(f"| {name} | {stat} | {shown} | {rho:+.2f} | {p:.2g} | {verdict} |")
    return "\n".join(lines)


def utilisation_table(root: Path) -> str:
    lines = ["| model | dead_neuron_frac by layer | stable_rank_mlp_out by layer |", "|---|---|---|"]
    for res in sorted((root / "trained").glob("*/results.csv")):
        df = pd.read_csv(res)
        cells = []
        for stat in ("dead_neuron_frac", "stable_rank_mlp_out"):
            v = df[df.statistic == stat].sort_values("layer")["value"].to_numpy(float)
            cells.append(", ".join(f"{x:.2f}" for x in v))
        widths = df[df.statistic == "dead_neuron_frac"].sort_values("layer")["d_ff"].astype(int).tolist()
        name = f"{res.parent.name} (widths {', '.join(map(str, widths))})"
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)
