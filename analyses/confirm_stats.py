"""The confirmatory study's pre-registered analysis (PREREGISTRATION.md), from the committed per-run files.

Every number of the confirmatory section (docs/studies/confirmatory.md) comes from here and only from
results/confirm/runs/*:
- outcome: each run's mean next-token NLL on the first TEST_TOKENS of the corpus' test split (test.csv);
- primary: paired t-test over seeds of (arm - uniform) for each of the three primary arms, Holm over the
  three; 95% CI of the mean paired difference; d_z;
- sensitivity: the pooled model nll ~ arm + seed (OLS, additive fixed effects), arm contrasts with Holm;
- directional: the width-centroid slope, nll ~ centroid + seed over every main-LR run, two-sided t;
- wins: a seed is a win (loss) only when its paired difference is below -TAU (above +TAU);
- power: the d_z (and nats, at the observed SD of paired differences) detectable at 80% power by a paired
  t-test with n seeds at alpha 0.05/3 (Holm's first step);
- learning-rate check: the paired cosine - uniform difference at each learning rate, seeds 0 and 1.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize, stats

BASELINE = "uniform"
PRIMARY = ("cosine:1.5:0.5", "hourglass", "probe-derived.json")
ALPHA = 0.05
TAU = 0.024
"""Rerun noise (nats): the SD of one run's loss between CPUs measured before this study (issue 31)."""
MAIN_LR = "3e-3"


RUN_COLUMNS = ["name", "arm", "seed", "lr", "source", "test_nll", "val_loss", "widths", "centroid"]


def load_runs(results: Path) -> pd.DataFrame:
    """One row per finished run: name, arm, seed, lr, test_nll, val_loss, widths, centroid."""
    rows = []
    for folder in sorted((results / "runs").glob("*/test.csv")):
        run = folder.parent
        cfg = json.loads((run / "config.json").read_text())
        info = json.loads((run / "run.json").read_text())
        nll = token_nll(folder)
        widths = _widths(cfg)
        rows.append({"name": run.name, "arm": _arm(run.name), "seed": int(run.name.rsplit("-s", 1)[1]),
                     "lr": _lr(run.name),
                     "source": run.name.startswith("source-"), "test_nll": nll,
                     "val_loss": _final_val(info), "widths": widths, "centroid": centroid(widths)})
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def token_nll(path: Path) -> float:
    """The mean next-token NLL of a `tlm eval` results table."""
    t = pd.read_csv(path)
    return float(t.loc[t["metric"] == "token_nll", "value"].iloc[0])


def _widths(cfg: dict) -> list[int]:
    """The per-layer MLP widths of a checkpoint's config.json (d_ff is a list in ours)."""
    d_ff = cfg["d_ff"]
    return [int(w) for w in d_ff] if isinstance(d_ff, list) else [int(d_ff)] * int(cfg["n_layers"])


def _final_val(info: dict) -> float:
    return float(info["val_loss"]) if isinstance(info.get("val_loss"), int | float) else float("nan")


LR_NAME = re.compile(r"^lr(\d[\d.]*(?:e-?\d+)?)-")
"""A learning-rate-check run: lr<LR>-<arm>-s<seed> (analyses.confirm.jobs)."""


def _lr(name: str) -> str:
    m = LR_NAME.match(name)
    return m.group(1) if m else MAIN_LR


def _arm(name: str) -> str:
    body = LR_NAME.sub("", name).rsplit("-s", 1)[0]
    body = body.removeprefix("source-")
    return {"cosine_1.5_0.5": "cosine:1.5:0.5", "probe-derived": "probe-derived.json"}.get(body, body)


def centroid(widths: list[int]) -> float:
    """Where the MLP width sits in depth: sum_l d_l t_l / sum_l d_l, t_l = l/(L-1) (uniform: 0.5)."""
    w = np.asarray(widths, dtype=float)
    t = np.linspace(0.0, 1.0, len(w))
    return float((w * t).sum() / w.sum())


def holm(p: list[float]) -> list[float]:
    """Holm step-down adjusted p-values (monotone, capped at 1)."""
    order = np.argsort(p)
    adj, running = np.empty(len(p)), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        adj[i] = running
    return adj.tolist()


def main_runs(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["lr"] == MAIN_LR) & ~df["source"]]


def paired(df: pd.DataFrame, arm: str, baseline: str = BASELINE) -> pd.Series:
    """arm - baseline test NLL per seed present in both."""
    wide = df.pivot_table(index="seed", columns="arm", values="test_nll")
    if arm not in wide or baseline not in wide:
        return pd.Series(dtype=float)
    return (wide[arm] - wide[baseline]).dropna()


PRIMARY_COLUMNS = ["arm", "n_pairs", "diff_mean", "diff_sd", "ci_low", "ci_high", "d_z", "t", "p", "wins",
                   "losses", "ties", "p_holm"]


def primary_contrasts(df: pd.DataFrame) -> pd.DataFrame:
    runs, rows = main_runs(df), []
    for arm in PRIMARY:
        d = paired(runs, arm)
        n = len(d)
        if n < 2:
            continue
        mean, sd = float(d.mean()), float(d.std(ddof=1))
        t, p = stats.ttest_1samp(d, 0.0)
        half = stats.t.ppf(1 - ALPHA / 2, n - 1) * sd / np.sqrt(n)
        rows.append({"arm": arm, "n_pairs": n, "diff_mean": mean, "diff_sd": sd, "ci_low": mean - half,
                     "ci_high": mean + half, "d_z": mean / sd if sd > 0 else float("nan"), "t": float(t),
                     "p": float(p), "wins": int((d < -TAU).sum()), "losses": int((d > TAU).sum()),
                     "ties": int((d.abs() <= TAU).sum())})
    out = pd.DataFrame(rows, columns=PRIMARY_COLUMNS[:-1])
    out["p_holm"] = holm(out["p"].tolist())
    return out


def _ols(y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Coefficients, their standard errors and the residual degrees of freedom."""
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    dof = len(y) - np.linalg.matrix_rank(x)
    sigma2 = float(((y - x @ beta) ** 2).sum() / dof)
    cov = sigma2 * np.linalg.pinv(x.T @ x)
    return beta, np.sqrt(np.diag(cov)), dof


def _seed_dummies(runs: pd.DataFrame) -> np.ndarray:
    seeds = sorted(runs["seed"].unique())
    return np.column_stack([np.ones(len(runs))] + [(runs["seed"] == s).to_numpy(float) for s in seeds[1:]])


def pooled_model(df: pd.DataFrame) -> pd.DataFrame:
    """Sensitivity: test_nll ~ arm + seed over the main-LR runs; each primary arm's coefficient."""
    runs = main_runs(df)
    arms = [a for a in PRIMARY if a in set(runs["arm"])]
    if not arms or BASELINE not in set(runs["arm"]):
        return pd.DataFrame()
    runs = runs[runs["arm"].isin([BASELINE, *arms])]
    x = np.column_stack([_seed_dummies(runs), *[(runs["arm"] == a).to_numpy(float) for a in arms]])
    beta, se, dof = _ols(runs["test_nll"].to_numpy(), x)
    k = x.shape[1] - len(arms)
    rows = []
    for j, arm in enumerate(arms):
        b, s = float(beta[k + j]), float(se[k + j])
        rows.append({"arm": arm, "coef": b, "se": s, "dof": int(dof), "t": b / s,
                     "p": float(2 * stats.t.sf(abs(b / s), dof))})
    out = pd.DataFrame(rows)
    out["p_holm"] = holm(out["p"].tolist())
    return out


def centroid_slope(df: pd.DataFrame) -> dict:
    """Directional test: test_nll ~ centroid + seed over every main-LR arm (nats per unit of centroid)."""
    runs = main_runs(df)
    if runs["centroid"].nunique() < 2:
        return {}
    x = np.column_stack([_seed_dummies(runs), runs["centroid"].to_numpy()])
    beta, se, dof = _ols(runs["test_nll"].to_numpy(), x)
    b, s = float(beta[-1]), float(se[-1])
    return {"slope": b, "se": s, "dof": int(dof), "t": b / s, "p": float(2 * stats.t.sf(abs(b / s), dof)),
            "n_runs": int(len(runs))}


def power_of(d_z: float, n: int, alpha: float) -> float:
    """Two-sided paired t-test power at standardized effect d_z with n pairs."""
    df, nc = n - 1, d_z * np.sqrt(n)
    tc = stats.t.ppf(1 - alpha / 2, df)
    low = stats.nct.cdf(-tc, df, nc)
    return float(stats.nct.sf(tc, df, nc) + (0.0 if np.isnan(low) else low))


def detectable_dz(n: int, alpha: float = ALPHA / len(PRIMARY), power: float = 0.8) -> float:
    return float(optimize.brentq(lambda d: power_of(d, n, alpha) - power, 0.01, 100.0))


def lr_check(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for lr, runs in df[~df["source"]].groupby("lr"):
        d = paired(runs, "cosine:1.5:0.5")
        d = d[d.index.isin([0, 1])]
        for seed, v in d.items():
            rows.append({"lr": lr, "seed": int(seed), "diff": float(v)})
    return pd.DataFrame(rows)


MAIN_RUNS = 36
"""4 arms x 9 seeds: the pre-registration allows no analysis before all of them have finished."""


def is_complete(df: pd.DataFrame) -> bool:
    runs = main_runs(df)
    return len(runs) >= MAIN_RUNS and runs.groupby("arm")["seed"].nunique().min() >= 9


def status_lines(df: pd.DataFrame, results: Path) -> list[str]:
    """STATUS.md: which runs have finished (no outcome: that waits for all of them)."""
    main, lr = main_runs(df), df[(df["lr"] != MAIN_LR) & ~df["source"]]
    derivation = results / "derivation.json"
    lines = ["# Confirmatory study: status", "",
             "Made by `python -m analyses.confirm collect` from `runs/*` (each finished run's files).", "",
             f"- main runs finished: {len(main)} of {MAIN_RUNS}"]
    for arm in ("uniform", *PRIMARY):
        seeds = sorted(main.loc[main["arm"] == arm, "seed"])
        lines.append(f"  - {arm}: {len(seeds)} of 9 seeds ({', '.join(map(str, seeds)) or 'none yet'})")
    lines.append(f"- learning-rate check (lr 1.5e-3): {len(lr)} of 4 runs")
    source = "finished" if df["source"].any() else "not yet"
    lines.append(f"- source model for the probe-derived arm: {source}")
    if derivation.is_file():
        d = json.loads(derivation.read_text())
        c = d["chosen"]
        stable = "stable" if d["all_stable"] else "NOT stable"
        lines.append(f"- probe-derived schedule (frozen): {c['widths_both']}; the halves differ by at most "
                     f"{c['max_diff_units']:g} rounding unit(s): {stable}"
                     f" (candidate: {c['statistic']}, power {c['power']}, ratios {c['min']}-{c['max']}, "
                     f"{c['rows']} windows of {d['seq_len']} training tokens per half)")
    closing = ("All main runs have finished: the pre-registered analysis is in contrasts.csv, pooled.csv, "
               "analysis.json and lr_check.csv." if is_complete(df) else
               "The pre-registered analysis runs once all main runs have finished; until then no contrast "
               "is computed.")
    return [*lines, "", closing, "", INTERIM]


INTERIM = ("What \"no interim analysis\" means here: each run's test score (runs/NAME/test.csv) and "
           "runs.csv were committed as the runs finished, so the scores were visible before the last run; "
           "what the code guaranteed is only that no contrast was computed before all main runs were in.")


def trajectories(results: Path, df: pd.DataFrame) -> pd.DataFrame:
    """Every run's validation loss over training (the eval lines of its metrics.jsonl), one row a point."""
    rows = []
    for run in df.itertuples():
        for line in (results / "runs" / run.name / "metrics.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if rec.get("kind") == "eval":
                rows.append({"name": run.name, "arm": run.arm, "seed": run.seed, "lr": run.lr,
                             "step": rec["step"], "tokens": rec["tokens"], "val_loss": rec["val_loss"]})
    return pd.DataFrame(rows, columns=["name", "arm", "seed", "lr", "step", "tokens", "val_loss"])


def write_all(results: Path) -> dict:
    """runs.csv, trajectories.csv and STATUS.md always; the pre-registered tables only once every main run
    has finished. Returns the analysis summary ({} before that)."""
    df = load_runs(results)
    trajectories(results, df).to_csv(results / "trajectories.csv", index=False, float_format="%.6g")
    flat = df.assign(widths=df["widths"].map(lambda w: " ".join(map(str, w))))
    flat.to_csv(results / "runs.csv", index=False, float_format="%.6g")
    (results / "STATUS.md").write_text("\n".join(status_lines(df, results)).rstrip() + "\n")
    if not is_complete(df):
        return {}
    tables = {"contrasts.csv": primary_contrasts(df), "pooled.csv": pooled_model(df),
              "lr_check.csv": lr_check(df)}
    for name, table in tables.items():
        table.to_csv(results / name, index=False, float_format="%.6g")
    contrasts = tables["contrasts.csv"]
    n = int(contrasts["n_pairs"].min())
    dz, sd = detectable_dz(n), float(contrasts["diff_sd"].median())
    summary = {"centroid_slope": centroid_slope(df),
               "power": {"n_pairs": n, "alpha": ALPHA / len(PRIMARY), "detectable_d_z": dz,
                         "median_diff_sd": sd, "detectable_nats": dz * sd}}
    (results / "analysis.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
