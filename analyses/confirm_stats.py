"""The confirmatory study's pre-registered analysis (PREREGISTRATION.md), from the committed per-run files.

Every number of the README's confirmatory section comes from here and only from results/confirm/runs/*:
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


def load_runs(results: Path) -> pd.DataFrame:
    """One row per finished run: name, arm, seed, lr, test_nll, val_loss, widths, centroid."""
    rows = []
    for folder in sorted((results / "runs").glob("*/test.csv")):
        run = folder.parent
        cfg = json.loads((run / "config.json").read_text())
        info = json.loads((run / "run.json").read_text())
        test = pd.read_csv(folder)
        nll = float(test.loc[test["metric"] == "token_nll", "value"].iloc[0])
        widths = _widths(cfg)
        rows.append({"name": run.name, "arm": _arm(run.name), "seed": int(run.name.rsplit("-s", 1)[1]),
                     "lr": run.name.split("-", 1)[0][2:] if run.name.startswith("lr") else MAIN_LR,
                     "source": run.name.startswith("source-"), "test_nll": nll,
                     "val_loss": _final_val(info), "widths": widths, "centroid": centroid(widths)})
    return pd.DataFrame(rows)


def _widths(cfg: dict) -> list[int]:
    """The per-layer MLP widths of a checkpoint's config.json (d_ff is a list in ours)."""
    d_ff = cfg["d_ff"]
    return [int(w) for w in d_ff] if isinstance(d_ff, list) else [int(d_ff)] * int(cfg["n_layers"])


def _final_val(info: dict) -> float:
    return float(info["val_loss"]) if isinstance(info.get("val_loss"), int | float) else float("nan")


def _arm(name: str) -> str:
    body = name.rsplit("-s", 1)[0]
    body = body.split("-", 1)[1] if name.startswith(("lr", "source-")) else body
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
    out = pd.DataFrame(rows)
    if not out.empty:
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
        rows.append({"arm": arm, "coef": b, "se": s, "dof": dof, "t": b / s,
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
    return {"slope": b, "se": s, "dof": dof, "t": b / s, "p": float(2 * stats.t.sf(abs(b / s), dof)),
            "n_runs": len(runs)}


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


def write_all(results: Path) -> dict:
    """Write the tables beside the runs; returns the power summary."""
    df = load_runs(results)
    tables = {"runs.csv": df.assign(widths=df["widths"].map(lambda w: " ".join(map(str, w)))),
              "contrasts.csv": primary_contrasts(df), "pooled.csv": pooled_model(df),
              "lr_check.csv": lr_check(df)}
    for name, table in tables.items():
        table.to_csv(results / name, index=False, float_format="%.6g")
    contrasts = tables["contrasts.csv"]
    n = int(contrasts["n_pairs"].min()) if not contrasts.empty else 0
    summary = {"centroid_slope": centroid_slope(df)}
    if n >= 2:
        dz = detectable_dz(n)
        sd = float(contrasts["diff_sd"].median())
        summary["power"] = {"n_pairs": n, "alpha": ALPHA / len(PRIMARY), "detectable_d_z": dz,
                            "median_diff_sd": sd, "detectable_nats": dz * sd}
    (results / "analysis.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
