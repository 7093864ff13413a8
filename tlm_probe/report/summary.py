"""The report's first screen: each comparison's paired differences (Δ, its 95% CI, p), the eval headline
and, placed by `sections.build_document`, the alignment-vs-depth figure. Numbers are copied from the
tables compare and eval wrote, never recomputed here."""

from __future__ import annotations

import pandas as pd

from tlm_probe.plotting.inputs import Comparison
from tlm_probe.report.html import Table, Text

# a multiple-comparison-adjusted p, where the paired table carries one (the suffixes compare may write)
ADJUSTED_P = ("_p_adj", "_p_holm")
FIRST_METRICS = ("val_loss", "train_loss")
DETECTABLE = "_detectable"  # the smallest |Δ| the pairs detect with 80% power (stats.power)
DETECTABLE_COLUMN = "detectable |Δ| (80% power)"


def paired_metrics(paired: pd.DataFrame) -> list[str]:
    """Metrics with a paired difference, val_loss first (the budget-matched headline)."""
    found = [c.removesuffix("_diff_mean") for c in paired.columns if c.endswith("_diff_mean")]
    return [m for m in FIRST_METRICS if m in found] + [m for m in found if m not in FIRST_METRICS]


def _adjusted(row: pd.Series, metric: str) -> float | None:
    cols = [f"{metric}{s}" for s in ADJUSTED_P if f"{metric}{s}" in row.index]
    return row[cols[0]] if cols else None


def paired_rows(name: str, paired: pd.DataFrame) -> list[dict]:
    rows = []
    for _, r in paired.iterrows():
        for m in paired_metrics(paired):
            row = {"comparison": name, "arm": r["arm"], "baseline": r.get("baseline", ""),
                   "n_pairs": r.get("n_pairs"), "metric": m, "Δ (arm − baseline)": r[f"{m}_diff_mean"],
                   "ci_low": r.get(f"{m}_diff_ci_low"), "ci_high": r.get(f"{m}_diff_ci_high"),
                   "p": r.get(f"{m}_p")}
            adjusted = _adjusted(r, m)
            if adjusted is not None:
                row["p (adjusted)"] = adjusted
            if f"{m}{DETECTABLE}" in r.index:
                row[DETECTABLE_COLUMN] = r[f"{m}{DETECTABLE}"]
            rows.append(row)
    return rows


def comparison_summary(comparisons: list[Comparison]) -> list:
    """One table over every comparison; a comparison without pairs says why, and pairs of one seed say
    they are not evidence (no CI, no p)."""
    rows, blocks = [], []
    for comp in comparisons:
        paired = comp.tables.get("paired")
        if paired is None or paired.empty:
            blocks.append(Text(f"{comp.path.name}: no paired differences yet (they need the baseline and "
                               "another arm, each with a finished seed)"))
            continue
        rows += paired_rows(comp.path.name, paired)
    if not rows:
        return blocks
    table = pd.DataFrame(rows)
    caption = "paired differences over seeds: Δ = arm − baseline (below 0: lower loss), 95% t-interval, p"
    if DETECTABLE_COLUMN in table:
        caption += "; and the smallest |Δ| those pairs detect 80% of the time (paired t, α 0.05)"
    blocks.insert(0, Table(caption, table))
    if (pd.to_numeric(table["n_pairs"], errors="coerce") < 2).any():
        blocks.append(Text("a row with fewer than 2 paired seeds has no CI and no p: it is not evidence of a "
                           "difference; train more seeds (--seeds)"))
    return blocks


def eval_headline(table: pd.DataFrame) -> Table:
    """The first metric of each task, one column per model (the full table is in the Evaluation section)."""
    first = table.groupby("task", sort=False)["metric"].transform("first")
    wide = table[table["metric"] == first].pivot_table(index=["task", "metric"], columns="model",
                                                       values="value", sort=False)
    return Table("evaluation: the first metric of each task, one column per model", wide.reset_index())


MORE_SEEDS = "train more seeds (--seeds 0,1,2) for a CI and a p"
NOT_EVIDENCE = f"one seed pair has no CI and no p: it is not evidence of a difference; {MORE_SEEDS}"


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and x == x and abs(x) != float("inf")


def paired_sentence(row: dict, metric: str = "val_loss") -> str:
    """One console line per paired row: 'cosine - uniform: Δ val loss -0.0264 (95% CI [-0.041, -0.012],
    p = 0.016, 3 seed pairs)'; a row of one pair says it is not evidence instead of a bare number."""
    what = metric.replace("_", " ")
    head = f"{row['arm']} - {row.get('baseline', '')}: Δ {what} {row[f'{metric}_diff_mean']:+.4f}"
    n = row.get("n_pairs")
    lo, hi, p = (row.get(f"{metric}_diff_ci_low"), row.get(f"{metric}_diff_ci_high"), row.get(f"{metric}_p"))
    if not (_finite(lo) and _finite(hi) and _finite(p)):
        return f"{head} ({n} seed pair{'s' if n != 1 else ''}: no CI or p, not evidence of a difference)"
    adjusted = next((row[f"{metric}{s}"] for s in ADJUSTED_P if _finite(row.get(f"{metric}{s}"))), None)
    p_text = f"p = {p:.2g}" + (f", adjusted {adjusted:.2g}" if adjusted is not None else "")
    detectable = row.get(f"{metric}{DETECTABLE}")
    power = f"; 80% power for |Δ| ≥ {detectable:.4f}" if _finite(detectable) else ""
    return f"{head} (95% CI [{lo:+.4f}, {hi:+.4f}], {p_text}, {n} seed pairs{power})"
