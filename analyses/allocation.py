"""Issue 21's depth-allocation study, the `allocation` part of analyses/study.py.

Three stages, each skipped when its output exists, so re-running continues where it stopped:
1. source: a uniform model (seed 100, not one of the study's seeds) trained at the study's scale;
2. its probe on the held-out split of builtin:pydoc (ablation ΔNLL of each MLP, alignment), and the
   schedule derived from it: widths ∝ ablation_dnll_mlp_zero, 0.25-2x the mean width, exact budget;
3. `tlm compare` of every arm (ARMS) x SEEDS: uniform, the paper's cosine taper and its reverse, OpenELM's
   linear growth, MLPs in the middle 70%, the hourglass, the probe-derived schedule, and the grouped
   thirds (9 layers: each control moves the same 3 x 128 units), all at identical parameters and FLOPs.

Scale: the study's CPU model with 9 layers, 800 steps of 16 x 128 tokens (1.64M tokens, 2.3 tokens per
parameter: the pilot in analyses/results/pilot shows the loss still falling there), checkpoints kept every
100 steps for the trajectories (`tlm probe RUN --checkpoints all`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

SEEDS = "0,1,2,3,4"
SOURCE_SEED = "100"
DERIVED = "probe-derived.json"
ARMS = ("uniform", "cosine:1.5:0.5", "cosine:0.5:1.5", "openelm", "middle:0.7", "hourglass", DERIVED,
        "wider-early", "wider-middle", "wider-late")
SCALE = {"--layers": "9", "--steps": "800", "--warmup": "40", "--eval-interval": "100"}
KEEP = {"keep_last": 9, "ckpt_interval": 100}
PROBE_STATS = "ablation_dnll_mlp_zero,align_mlp_mid,align_abs_mlp_mid,taylor_mlp"
RULE = ["--statistic", "ablation_dnll_mlp_zero", "--rule", "x", "--min-ratio", "0.25", "--max-ratio", "2.0"]


def scaled(flags: list[str]) -> list[str]:
    """The study's training flags with this part's depth, steps, warmup and eval interval."""
    out = list(flags)
    for flag, value in SCALE.items():
        out[out.index(flag) + 1] = value
    return out


def _config(folder: Path) -> Path:
    """A training-options file keeping every 100-step checkpoint (flags cannot say it)."""
    path = folder / "keep_checkpoints.yaml"
    if not path.is_file():
        path.write_text(json.dumps(KEEP) + "\n")
    return path


def _derive(root: Path, flags: list[str], tlm) -> Path:
    """Train the source model, probe it on held-out text, write the derived schedule file."""
    source = root / "allocation-source"
    source.mkdir(parents=True, exist_ok=True)
    run = source / "runs" / f"uniform-s{SOURCE_SEED}"
    if not (run / "run.json").is_file():
        tlm("compare", "--schedules", "uniform", "--seeds", SOURCE_SEED, "--out", str(source), *flags)
    probe = source / "probe"
    if not (probe / "results.csv").is_file():
        tlm("probe", str(run), "--data", "builtin:pydoc", "--split", "val", "--max-tokens", "16384",
            "--threads", "1", "--stats", PROBE_STATS, "--out", str(probe))
    schedule = source / DERIVED
    if not schedule.is_file():
        d_ff, multiple = flags[flags.index("--d-ff") + 1], flags[flags.index("--multiple-of") + 1]
        tlm("schedule", "--from-probe", str(probe), *RULE, "--layers", SCALE["--layers"], "--d-ff", d_ff,
            "--multiple-of", multiple, "--out", str(schedule))
    return schedule


def run(opts, flags: list[str], tlm) -> None:
    flags = scaled(flags)
    schedule = _derive(opts.root, flags, tlm)
    # compare's inputs live beside its folder (tlm writes --out alone); the derived arm is named by its
    # file name, which compare resolves relative to the working directory
    inputs = opts.root / "allocation-inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    if not (inputs / DERIVED).is_file():
        shutil.copyfile(schedule, inputs / DERIVED)
    tlm("compare", "--schedules", ",".join(ARMS), "--seeds", SEEDS, "--config", str(_config(inputs)),
        "--out", str(opts.root / "allocation"), *flags, "--json", cwd=inputs)


TRAJECTORY_STATS = ("align_mlp_mid", "ablation_dnll_mlp_zero")


def best_arm(folder: Path) -> str | None:
    """The arm with the lowest mean paired Δ val loss against uniform (None before any pair exists)."""
    import pandas as pd

    path = folder / "paired.csv"
    if not path.is_file() or path.stat().st_size < 2:
        return None
    paired = pd.read_csv(path)
    return None if paired.empty else str(paired.loc[paired["val_loss_diff_mean"].idxmin(), "arm"])


def trajectories(opts, tlm, dst: Path) -> list[str]:
    """Probe the kept checkpoints of seed 0 of uniform and of the best arm; draw each statistic over steps.
    Returns the Markdown lines naming the figures."""
    src = opts.root / "allocation"
    best = best_arm(src)
    arms = ["uniform", *([best] if best and best != "uniform" else [])]
    folders = []
    for arm in arms:
        run = src / "runs" / f"{arm.replace('/', '_')}-s0"
        out = opts.root / "allocation-trajectories" / run.name
        if not (run / "run.json").is_file():
            continue
        if not (out / "results.csv").is_file():
            tlm("probe", str(run), "--checkpoints", "all", "--data", "builtin:pydoc", "--split", "val",
                "--max-tokens", "8192", "--threads", "1", "--stats", ",".join(TRAJECTORY_STATS),
                "--out", str(out))
        folders.append(out)
    lines = []
    for stat in TRAJECTORY_STATS if folders else ():
        fig = dst / f"trajectory_{stat}.png"
        tlm("plot", *map(str, folders), "--kind", "trajectory", "--statistic", stat, "--out", str(fig))
        lines.append(f"![{stat} over training]({fig.name})")
    if (src / "compare.json").is_file():
        tlm("plot", str(src), "--kind", "advantage", "--out", str(dst / "advantage.png"))
        lines.append("![each arm's Δ val loss against uniform over training](advantage.png)")
    return lines


def collect(opts, tlm, dst: Path) -> list[str]:
    """Copy the derived schedule and its source probe next to the tables; the trajectory figures."""
    source = opts.root / "allocation-source"
    for name in (DERIVED, "probe/results.csv", "probe/provenance.json"):
        if (source / name).is_file():
            (dst / "source" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, dst / "source" / name)
    return ["### allocation: trajectories (seed 0)", "", *trajectories(opts, tlm, dst), ""]
