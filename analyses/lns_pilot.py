"""A 2 x 2 pilot (exploratory, not pre-registered): taper (uniform | cosine 1.5->0.5) x LayerNorm Scaling
(none | lns), 5 paired seeds, at the confirmatory study's model and corpus but a shorter run.

    python -m analyses.lns_pilot run --data PREPARED_BUILTIN_ENV_FOLDER [--root runs/lns_pilot]
    python -m analyses.lns_pilot collect [--root runs/lns_pilot]     # -> analyses/results/lns_pilot/

`run` is two ordinary `tlm compare` runs, one per norm scaling, side by side (one thread each); re-running
continues them. Arms of one seed see the same batches in both comparisons, so every effect is paired by seed:
taper under none, taper under lns, LNS on the uniform stack, and the interaction (does LNS change the
taper's effect: (cosine - uniform | lns) - (cosine - uniform | none)), each a mean over seeds with its 95% t
interval. The outcome is the final validation loss on 65,536 tokens in windows drawn over the whole
validation split (the trainer's default --eval-sample spread since issue 44; the first run scored the split's
first 65,536 tokens); the test split stays the confirmatory studies'.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "analyses" / "results" / "lns_pilot"
SCALINGS = ("none", "lns")
SEEDS = "0,1,2,3,4"
MODEL = ["--d-model", "64", "--layers", "9", "--heads", "4", "--d-ff", "256", "--multiple-of", "32"]
TRAIN = ["--seq-len", "128", "--batch-size", "16", "--steps", "400", "--warmup", "20", "--lr", "3e-3",
         "--eval-interval", "100", "--eval-tokens", "65536", "--threads", "1"]
EFFECTS = {
    "taper | none": lambda w: w[("cosine:1.5:0.5", "none")] - w[("uniform", "none")],
    "taper | lns": lambda w: w[("cosine:1.5:0.5", "lns")] - w[("uniform", "lns")],
    "lns | uniform": lambda w: w[("uniform", "lns")] - w[("uniform", "none")],
    "interaction": lambda w: (w[("cosine:1.5:0.5", "lns")] - w[("uniform", "lns")])
    - (w[("cosine:1.5:0.5", "none")] - w[("uniform", "none")]),
}


def compare_args(data: str, scaling: str, out: Path) -> list[str]:
    return [sys.executable, str(REPO / "cli.py"), "compare", "--data", data, *MODEL, *TRAIN,
            "--schedules", "uniform,cosine:1.5:0.5", "--seeds", SEEDS, "--norm-scaling", scaling,
            "--out", str(out)]


def run(opts) -> None:
    procs = []
    for scaling in SCALINGS:
        log = (opts.root / f"{scaling}.log").open("a")
        procs.append(subprocess.Popen(compare_args(opts.data, scaling, opts.root / scaling), stdout=log,
                                      stderr=subprocess.STDOUT))
    codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"error: a comparison failed (exit codes {codes}); see {opts.root}/*.log")


def effects(runs: pd.DataFrame) -> pd.DataFrame:
    """Each paired effect over seeds: mean, 95% t interval, p (two-sided one-sample t), n."""
    wide = runs.pivot_table(index="seed", columns=["arm", "norm_scaling"], values="val_loss")
    rows = []
    for name, fn in EFFECTS.items():
        d = fn(wide).dropna().to_numpy()
        low, high = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        rows.append({"effect": name, "mean": d.mean(), "ci_low": low, "ci_high": high,
                     "p": stats.ttest_1samp(d, 0.0).pvalue, "n_seeds": len(d)})
    return pd.DataFrame(rows)


def collect(opts) -> None:
    parts = [pd.read_csv(opts.root / s / "results.csv").assign(norm_scaling=s) for s in SCALINGS]
    runs = pd.concat(parts)[["arm", "norm_scaling", "seed", "val_loss", "params", "tokens"]]
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs.to_csv(RESULTS / "runs.csv", index=False, float_format="%.6g")
    table = effects(runs)
    table.to_csv(RESULTS / "effects.csv", index=False, float_format="%.6g")
    cells = runs.groupby(["arm", "norm_scaling"])["val_loss"].agg(["mean", "std", "count"])
    print(cells.to_string(float_format=lambda v: f"{v:.4f}"))
    print(table.to_string(index=False, float_format=lambda v: f"{v:+.4f}"))
    assert np.all(runs.groupby(["arm", "norm_scaling"])["params"].nunique() == 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("part", choices=("run", "collect"))
    p.add_argument("--root", type=Path, default=REPO / "runs" / "lns_pilot")
    p.add_argument("--data", default="builtin:env", help="the prepared builtin:env bpe:2048 folder")
    opts = p.parse_args()
    opts.root.mkdir(parents=True, exist_ok=True)
    run(opts) if opts.part == "run" else collect(opts)


if __name__ == "__main__":
    main()
