"""The confirmatory result of docs/studies/confirmatory.md, as markdown, from the pre-registered tables
(analyses.confirm_stats).

`python -m analyses.confirm collect` writes it to results/confirm/section.md once every main run has
finished; that page carries the same table and sentences, and
tests/test_confirm_readme.py recomputes each number there from the per-run files, independently of this code.
"""

from __future__ import annotations

import pandas as pd

from analyses import confirm_stats as cs

LABELS = {"uniform": "uniform", "cosine:1.5:0.5": "cosine 1.5→0.5", "hourglass": "hourglass",
          "probe-derived.json": "probe-derived"}
HEADER = ("| arm | test NLL, mean ± SD (9 seeds) | Δ vs uniform [95% CI] | d_z | p | p (Holm, 3) "
          "| wins / ties / losses | pooled model: Δ, p (Holm) |")


def _num(x: float, digits: int, sign: bool = True) -> str:
    """Fixed decimals with a real minus sign (and + where sign), as the docs print numbers."""
    s = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    return s.replace("-", "−")


def _p(p: float) -> str:
    """Two significant digits, never in exponent form (0.00052, 0.17)."""
    return f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def _widths(df: pd.DataFrame, arm: str) -> str:
    w = df.loc[df["arm"] == arm, "widths"].iloc[0]
    return f"`{','.join(map(str, w))}`"


def widths_line(df: pd.DataFrame) -> str:
    """The arms' MLP widths, one sentence under the table (a column of them made it scroll sideways)."""
    arms = "; ".join(f"{LABELS[a]} {_widths(df, a)}" for a in (cs.BASELINE, *cs.PRIMARY))
    return f"MLP widths, layer 0 → 8: {arms}."


def _arm_row(df: pd.DataFrame, c: pd.Series, pooled: pd.Series) -> str:
    nll = cs.main_runs(df).loc[lambda r: r["arm"] == c["arm"], "test_nll"]
    return (f"| {LABELS[c['arm']]} | {nll.mean():.4f} ± {nll.std(ddof=1):.4f} | "
            f"{_num(c['diff_mean'], 4)} [{_num(c['ci_low'], 4)}, {_num(c['ci_high'], 4)}] | "
            f"{_num(c['d_z'], 2)} | {_p(c['p'])} | {_p(c['p_holm'])} | "
            f"{c['wins']} / {c['ties']} / {c['losses']} | "
            f"{_num(pooled['coef'], 4)}, {_p(pooled['p_holm'])} |")


def primary_table(df: pd.DataFrame) -> list[str]:
    contrasts, pooled = cs.primary_contrasts(df), cs.pooled_model(df).set_index("arm")
    base = cs.main_runs(df).loc[lambda r: r["arm"] == cs.BASELINE, "test_nll"]
    rows = [HEADER, "|---|---|---|---|---|---|---|---|",
            f"| uniform | {base.mean():.4f} ± {base.std(ddof=1):.4f} | | | | | | |"]
    rows += [_arm_row(df, c, pooled.loc[c["arm"]]) for _, c in contrasts.iterrows()]
    return rows


def directional_line(slope: dict, rest: dict | None = None) -> str:
    """The slope sentence; `rest`: the same slope without the probe-derived arm (what it rests on)."""
    line = (f"Width-centroid slope (the one directional test): {_num(slope['slope'], 3)} nats per unit of "
            f"centroid (SE {slope['se']:.3f}, t = {_num(slope['t'], 2)}, p = {_p(slope['p'])}, "
            f"{slope['n_runs']} runs, seed fixed effects).")
    if rest:
        line += (f" It rests on one arm: without the probe-derived arm the slope is {_num(rest['slope'], 3)} "
                 f"(SE {rest['se']:.3f}, p = {_p(rest['p'])}, {rest['n_runs']} runs).")
    return line


def power_line(power: dict) -> str:
    return (f"Power: with {power['n_pairs']} pairs at α = 0.05/3 the design detects d_z = "
            f"{power['detectable_d_z']:.2f} with 80% power, i.e. {power['detectable_nats']:.4f} nats at the "
            f"observed median SD of the paired differences ({power['median_diff_sd']:.4f} nats).")


def lr_lines(df: pd.DataFrame) -> list[str]:
    table = cs.lr_check(df)
    rows = ["| learning rate | Δ cosine − uniform, seed 0 | seed 1 |", "|---|---|---|"]
    for lr, part in table.groupby("lr", sort=False):
        by_seed = dict(zip(part["seed"], part["diff"], strict=True))
        cells = [_num(by_seed[s], 4) if s in by_seed else "not finished" for s in (0, 1)]
        rows.append(f"| {lr} | {cells[0]} | {cells[1]} |")
    return rows


def section(df: pd.DataFrame, summary: dict) -> list[str]:
    rest = cs.centroid_slope(df[df["arm"] != "probe-derived.json"])
    return [*primary_table(df), "", widths_line(df), "", directional_line(summary["centroid_slope"], rest),
            "", power_line(summary["power"]), "", *lr_lines(df)]
