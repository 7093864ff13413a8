"""The paper's mechanism under each reading of "the residual stream it is added to": cos(MLP out, resid_pre),
cos(MLP out, resid_mid) and cos(MLP out, resid_post), per layer with 95% CIs over tokens (sequence-clustered,
from the probe), and whether each rises with depth (Spearman ρ of the per-layer means with the layer index).

    python -m analyses.mechanism_readings PROBE_DIR [PROBE_DIR ...]   # -> results/mechanism/readings/

Each PROBE_DIR is a `tlm probe --stats alignment` result; its results.csv and provenance.json are copied
under results/mechanism/readings/<folder name>/ and readings.md is written from the copies alone.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd

from analyses.study_summary import trend

RESULTS = Path(__file__).resolve().parent / "results" / "mechanism" / "readings"
READINGS = ("align_mlp_pre", "align_mlp_mid", "align_mlp_post")


def _layers(v: pd.DataFrame) -> str:
    cells = [f"{m:+.2f}" for m in v["value"]]
    return ", ".join(cells) if len(cells) <= 12 else ", ".join(cells[:4] + ["…"] + cells[-3:])


def _end(row: pd.Series) -> str:
    return f"{row['value']:+.3f} [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]"


def table(root: Path = RESULTS) -> list[str]:
    lines = ["| model | reading | cos by layer (first → last) | first layer [95% CI] | last layer [95% CI] "
             "| Spearman ρ | p | verdict |", "|---|---|---|---|---|---|---|---|"]
    for res in sorted(root.glob("*/results.csv")):
        df = pd.read_csv(res)
        for stat in READINGS:
            v = df[df["statistic"] == stat].sort_values("layer")
            if len(v) < 3:
                continue
            rho, p, verdict = trend(v["value"].to_numpy(float))
            lines.append(f"| {res.parent.name} | {stat} | {_layers(v)} | {_end(v.iloc[0])} | "
                         f"{_end(v.iloc[-1])} | {rho:+.2f} | {p:.2g} | {verdict} |")
    return lines


def main() -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    for src in map(Path, sys.argv[1:]):
        dst = RESULTS / src.name
        dst.mkdir(exist_ok=True)
        for name in ("results.csv", "provenance.json"):
            shutil.copyfile(src / name, dst / name)
    (RESULTS / "readings.md").write_text("\n".join(table()) + "\n")
    print("\n".join(table()))


if __name__ == "__main__":
    main()
