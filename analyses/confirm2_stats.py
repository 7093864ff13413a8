"""Study 2's pre-registered analysis (results/confirm2/PREREGISTRATION.md), from the committed per-run files.

- outcome (primary): each main run's mean next-token NLL on 1,048,576 test tokens in windows spread over the
  whole test split (runs/NAME/test.csv); continuity outcome: the first 262,144 test tokens (test_prefix.csv);
- primary: paired t-test over seeds of (arm - uniform) for probe-derived and wide-first, Holm over the two;
  95% t interval of the mean paired difference; d_z; wins/losses/ties at study 1's rerun noise TAU;
- secondary (registered, each reported as secondary): the same two contrasts on the continuity outcome; the
  paired probe-derived - wide-first difference (unadjusted p); the pooled model nll ~ arm + seed;
- power: the d_z and nats detectable at 80% by the paired t-test with the study's pairs at alpha 0.025, and
  the power for study 1's -0.0266 nats at the observed SD;
- learning-rate check (descriptive, validation only): val_nll at each rate, per (arm, seed).
No contrast is computed before every main run has finished (is_complete).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from analyses.confirm2 import ARMS, CONTRASTS, LR_CHECK, MAIN_LR, SCORES, SEEDS
from analyses.confirm_stats import (
    ALPHA,
    TAU,
    _ols,
    _seed_dummies,
    centroid,
    detectable_dz,
    holm,
    power_of,
    token_nll,
)

BASELINE = "uniform"
OUTCOMES = {"test.csv": "test_nll", "test_prefix.csv": "test_prefix_nll", "val.csv": "val_nll"}
STUDY1 = {"diff_mean": -0.026616, "diff_sd": 0.0417489}
"""Study 1's probe-derived - uniform contrast (results/confirm/contrasts.csv), which sized this study."""
RUN_COLUMNS = ["name", "arm", "seed", "lr", *OUTCOMES.values(), "documents", "started", "ended",
               "model_sha256", "widths", "centroid"]


def load_runs(results: Path) -> pd.DataFrame:
    rows = []
    for info_path in sorted((results / "runs").glob("*/run.json")):
        run = info_path.parent
        info, cfg = json.loads(info_path.read_text()), json.loads((run / "config.json").read_text())
        scores = {col: token_nll(run / name) for name, col in OUTCOMES.items()}
        widths = [int(w) for w in cfg["d_ff"]]
        rows.append({"name": run.name, "arm": info["arm"], "seed": int(info["seed"]), "lr": info["lr"],
                     **scores, "documents": _documents(run / "test.csv"), "started": info["started"],
                     "ended": info["ended"], "model_sha256": info["model_sha256"], "widths": widths,
                     "centroid": centroid(widths)})
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def _documents(path: Path) -> str:
    """'covered of split' for the primary outcome, from the eval's provenance beside the table."""
    prov = path.with_name("test_provenance.json")
    if not prov.is_file():
        return ""
    p = json.loads(prov.read_text())["perplexity"][0]
    return f"{p['documents']} of {p['documents_split']}"


def main_runs(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["lr"] == MAIN_LR) & df["arm"].isin(list(ARMS)) & df["seed"].isin(SEEDS)]


def is_complete(df: pd.DataFrame) -> bool:
    runs = main_runs(df)
    return all(set(runs.loc[runs["arm"] == a, "seed"]) >= set(SEEDS) for a in ARMS)


def paired(runs: pd.DataFrame, arm: str, baseline: str = BASELINE, col: str = "test_nll") -> pd.Series:
    wide = runs.pivot_table(index="seed", columns="arm", values=col)
    return (wide[arm] - wide[baseline]).dropna()


def contrast_row(d: pd.Series, arm: str, baseline: str) -> dict:
    n, mean, sd = len(d), float(d.mean()), float(d.std(ddof=1))
    t, p = stats.ttest_1samp(d, 0.0)
    half = stats.t.ppf(1 - ALPHA / 2, n - 1) * sd / np.sqrt(n)
    return {"arm": arm, "baseline": baseline, "n_pairs": n, "diff_mean": mean, "diff_sd": sd,
            "ci_low": mean - half, "ci_high": mean + half, "d_z": mean / sd, "t": float(t), "p": float(p),
            "wins": int((d < -TAU).sum()), "losses": int((d > TAU).sum()),
            "ties": int((d.abs() <= TAU).sum())}


def contrasts(df: pd.DataFrame, col: str = "test_nll") -> pd.DataFrame:
    """The two registered contrasts against uniform on outcome `col`, Holm over the two."""
    runs = main_runs(df)
    out = pd.DataFrame([contrast_row(paired(runs, a, col=col), a, BASELINE) for a in CONTRASTS])
    out["p_holm"] = holm(out["p"].tolist())
    return out.assign(outcome=col)


def secondary(df: pd.DataFrame) -> pd.DataFrame:
    """Registered secondary rows: the contrasts on the continuity outcome, and probe-derived - wide-first."""
    runs = main_runs(df)
    between = pd.DataFrame([contrast_row(paired(runs, "probe-derived", "wide-first"), "probe-derived",
                                         "wide-first")]).assign(outcome="test_nll", p_holm=np.nan)
    return pd.concat([contrasts(df, "test_prefix_nll"), between], ignore_index=True)


def pooled_model(df: pd.DataFrame) -> pd.DataFrame:
    """Sensitivity: test_nll ~ arm + seed over the main runs; each contrast arm's coefficient, Holm."""
    runs = main_runs(df)
    x = np.column_stack([_seed_dummies(runs), *[(runs["arm"] == a).to_numpy(float) for a in CONTRASTS]])
    beta, se, dof = _ols(runs["test_nll"].to_numpy(), x)
    k = x.shape[1] - len(CONTRASTS)
    t = beta[k:] / se[k:]
    rows = [{"arm": a, "coef": float(beta[k + j]), "se": float(se[k + j]), "dof": int(dof), "t": float(t[j]),
             "p": float(2 * stats.t.sf(abs(t[j]), dof))} for j, a in enumerate(CONTRASTS)]
    out = pd.DataFrame(rows)
    out["p_holm"] = holm(out["p"].tolist())
    return out


def power_summary(table: pd.DataFrame) -> dict:
    n, alpha = int(table["n_pairs"].min()), ALPHA / len(CONTRASTS)
    sd = float(table["diff_sd"].median())
    dz = detectable_dz(n, alpha)
    return {"n_pairs": n, "alpha": alpha, "detectable_d_z": dz, "median_diff_sd": sd,
            "detectable_nats": dz * sd,
            "power_for_study1_effect": power_of(abs(STUDY1["diff_mean"]) / sd, n, alpha),
            "planned_power": power_of(abs(STUDY1["diff_mean"]) / STUDY1["diff_sd"], len(SEEDS), alpha)}


def lr_table(df: pd.DataFrame) -> pd.DataFrame:
    """val_nll per (arm, seed) at every learning rate of the check, and the difference from 3e-3."""
    check = df[df["seed"].isin(LR_CHECK["seeds"]) & df["arm"].isin(LR_CHECK["arms"])]
    wide = check.pivot_table(index=["arm", "seed"], columns="lr", values="val_nll")
    rows = []
    for (arm, seed), r in wide.iterrows():
        for lr in LR_CHECK["lrs"]:
            if lr in r and MAIN_LR in r and not np.isnan(r[lr]) and not np.isnan(r[MAIN_LR]):
                rows.append({"arm": arm, "seed": int(seed), "lr": lr, "val_nll": float(r[lr]),
                             "val_nll_3e-3": float(r[MAIN_LR]), "diff": float(r[lr] - r[MAIN_LR])})
    return pd.DataFrame(rows, columns=["arm", "seed", "lr", "val_nll", "val_nll_3e-3", "diff"])


def lr_helps(results: Path, lr: str) -> bool:
    """The registered rule for running 1.2e-2: every pair of the check at `lr` is in and their mean
    val_nll(lr) - val_nll(3e-3) is below 0."""
    t = lr_table(load_runs(results))
    t = t[t["lr"] == lr]
    return len(t) == len(LR_CHECK["arms"]) * len(LR_CHECK["seeds"]) and float(t["diff"].mean()) < 0


def status_lines(df: pd.DataFrame) -> list[str]:
    main = main_runs(df)
    lines = ["# Study 2: status", "", "Made by `python -m analyses.confirm2 collect` from `runs/*`.", "",
             f"- main runs finished: {len(main)} of {len(ARMS) * len(SEEDS)}"]
    for arm in ARMS:
        seeds = sorted(main.loc[main["arm"] == arm, "seed"])
        lines.append(f"  - {arm}: {len(seeds)} of {len(SEEDS)} seeds ({_span(seeds)})")
    check = df[df["lr"] != MAIN_LR]
    lines.append(f"- learning-rate check: {len(check)} runs above 3e-3 "
                 f"({', '.join(f'{lr}: {n}' for lr, n in check.groupby('lr').size().items()) or 'none yet'})")
    closing = ("All main runs have finished: the registered analysis is in contrasts.csv, secondary.csv, "
               "pooled.csv, analysis.json and lr_check.csv." if is_complete(df) else
               "No contrast is computed until every main run has finished (the code refuses).")
    return [*lines, "", closing]


def _span(seeds: list[int]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if seeds else "none yet"


def write_all(results: Path) -> dict:
    df = load_runs(results)
    flat = df.assign(widths=df["widths"].map(lambda w: " ".join(map(str, w))))
    if not is_complete(df):  # no table shows a test score before the last main run (no interim look)
        flat = flat.drop(columns=["test_nll", "test_prefix_nll"])
    flat.to_csv(results / "runs.csv", index=False, float_format="%.6g")
    (results / "STATUS.md").write_text("\n".join(status_lines(df)) + "\n")
    lr_table(df).to_csv(results / "lr_check.csv", index=False, float_format="%.6g")
    if not is_complete(df):
        return {}
    primary = contrasts(df)
    tables = {"contrasts.csv": primary, "secondary.csv": secondary(df), "pooled.csv": pooled_model(df)}
    for name, table in tables.items():
        table.to_csv(results / name, index=False, float_format="%.6g")
    summary = {"power": power_summary(primary), "scores": SCORES}
    (results / "analysis.json").write_text(json.dumps(summary, indent=2) + "\n")
    from analyses.confirm2_section import section

    (results / "section.md").write_text("\n".join(section(df, summary)) + "\n")
    return summary
