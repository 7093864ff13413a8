"""`tlm demo`: the embedded-default main job. With no input and no network it trains a small uniform and a
cosine-tapered model of equal budget on the embedded corpus (builtin:pydoc, byte-level), writes their
comparison, then probes both on the validation split and draws alignment against depth.

OUT/ is a comparison folder (runs/, results.csv, summary.csv, paired.csv, compare.json) plus
OUT/probe/<arm>-s<seed>/ (probe result folders), OUT/alignment_vs_depth.png, OUT/loss_curves.png,
OUT/paired.png (with two seeds or more) and OUT/demo.json (what was done, where, how long).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tlm_probe.data.stream import load_token_data
from tlm_probe.errors import UserError
from tlm_probe.files.fileio import atomic_write_text, record
from tlm_probe.files.out_folder import claim
from tlm_probe.threads import torch_threads
from tlm_probe.train.arms import make_arms, run_name
from tlm_probe.train.compare import COMPARE_FILES, PAIRED_FIGURE, SWEEP_FILES, compare_arms
from tlm_probe.train.config import TrainConfig
from tlm_probe.train.run import writer_lock
from tlm_probe.workflows.compare_figures import write_paired_figure

ARMS = ["uniform", "cosine:1.5:0.5"]
# ~0.6M training tokens per arm: a couple of minutes for both arms on 2 CPU cores
_FULL = dict(d_model=128, n_layers=4, n_heads=4, d_ff=512, seq_len=128, batch_size=16, steps=300, lr=3e-3,
            warmup=30, eval_interval=50, eval_tokens=16384, log_interval=5, ckpt_interval=100)
# seconds: for tests and notebooks that only need the plumbing
_QUICK = dict(d_model=64, n_layers=4, n_heads=2, d_ff=256, seq_len=64, batch_size=8, steps=20, lr=3e-3,
             warmup=5, eval_interval=10, eval_tokens=1024, log_interval=2)
PROBE_TOKENS = {"full": 16384, "quick": 1024}
DEMO_FILES = ("probe", "loss_curves.png", "alignment_vs_depth.png", "demo.json")  # beside compare's files


def demo_config(quick: bool = False, steps: int | None = None, device: str = "auto",
                threads: int = 0, mixer: str = "attention",
                mixer_settings: dict[str, Any] | None = None) -> TrainConfig:
    """mixer_settings: TrainConfig mixer fields (window, cms_chunks, match_params, ...) given as flags."""
    opts: dict[str, Any] = dict(_QUICK if quick else _FULL, mixer=mixer, **(mixer_settings or {}))
    if steps is not None and steps < 1:
        raise UserError(f"--steps must be >= 1, got {steps}")
    if steps:
        opts["steps"] = steps
        opts["eval_interval"] = min(opts["eval_interval"], steps)
    return TrainConfig(data="builtin:pydoc", tokenizer="byte", device=device, threads=threads, **opts)


def run_demo(out: str | Path, *, quick: bool = False, steps: int | None = None,
             seeds: list[int] | None = None, overwrite: bool = False, device: str = "auto", threads: int = 0,
             train_fn: Callable | None = None, probe: bool = True, mixer: str = "attention",
             mixer_settings: dict | None = None) -> dict:
    started = time.perf_counter()
    out, seeds = Path(out), seeds or [0]
    base = demo_config(quick, steps, device, threads, mixer, mixer_settings)  # refuses threads < 0
    # compare checks the rest
    claim(out, overwrite=overwrite, writes=(*DEMO_FILES, *COMPARE_FILES, PAIRED_FIGURE),
          own_needs_overwrite=False, kind="demo", owned=SWEEP_FILES)
    data = load_token_data(base.data, base.tokenizer)
    # training sets base.threads per run; the probes and figures run under the same setting
    with writer_lock(out), torch_threads(base.threads):  # compare_arms() takes the same lock again
        return _demo(out, base, data, seeds, overwrite, train_fn, probe, quick, started)




def _demo(out: Path, base, data, seeds, overwrite, train_fn, probe, quick, started) -> dict:
    arms = [a.name for a in make_arms([base.mixer], ARMS)]
    result = compare_arms(base, ARMS, seeds, out, overwrite=overwrite, data=data, train_fn=train_fn)
    names = [f"probe/{run_name(arm, seed)}" for seed in seeds for arm in ARMS]
    record(out, [*names, *DEMO_FILES[1:]], "demo")
    trained = time.perf_counter() - started
    doc = {
        "out": str(out),
        "mixer": base.mixer,
        "arms": arms,
        "seeds": seeds,
        "config": base.to_dict(),
        "summary": result["summary"],
        "paired": result["paired"],
        "train_seconds": trained,
    }
    doc["figures"] = {"loss_curves": _curves(out, base.progress)}
    paired = write_paired_figure(out, "demo")  # with two seeds or more
    if paired:
        doc["figures"]["paired"] = str(paired)
    if probe:
        doc.update(_probe_and_plot(out, data.val, base, arms, seeds, "quick" if quick else "full"))
    doc["wall_seconds"] = time.perf_counter() - started
    atomic_write_text(out / "demo.json", json.dumps(doc, indent=2, default=str) + "\n")
    return doc


def _curves(out: Path, progress: bool = True) -> str:
    from tlm_probe.progress import Phase

    path = out / "loss_curves.png"
    with Phase(f"demo: drawing {path}", enabled=progress):  # matplotlib's import alone takes seconds
        from tlm_probe.plotting import plot_curves, save_figure
        from tlm_probe.plotting.inputs import load_comparison

        save_figure(plot_curves(load_comparison(out).curves), path)
    return str(path)


def _probe_and_plot(out: Path, val: np.ndarray, base: TrainConfig, arms: list[str], seeds: list[int],
                    size: str) -> dict:
    """Probe every trained model on the same validation ids; one figure of alignment against depth. With
    base.progress, each probe says which model it probes, then draws the probe's own progress."""
    import pandas as pd

    from tlm_probe.plotting import plot_depth, save_figure
    from tlm_probe.probe.engine import ProbeOptions, run_probe
    from tlm_probe.progress import Phase, say
    from tlm_probe.results import write_results

    tables, folders = [], {}
    ids = np.asarray(val, dtype=np.int64)  # the exact validation ids the trainer evaluated on
    for seed in seeds:
        for arm in arms:
            name = run_name(arm, seed)
            if base.progress:
                say(f"demo: probing {name} on the validation split ({PROBE_TOKENS[size]:,} tokens)")
            opts = ProbeOptions(data=ids, seq_len=base.seq_len, max_tokens=PROBE_TOKENS[size],
                                batch_size=base.batch_size,
                                split="val")  # the ids are the trainer's validation split: options say so
            res = run_probe(out / "runs" / name, opts, progress=base.progress)
            # the ids came as an array: name the source they were cut from
            res.provenance["data"].update(source=str(base.data))
            folders[name] = str(write_results(out / "probe" / name, res.table, res.matrices, res.provenance))
            tables.append(res.table)
    figure = out / "alignment_vs_depth.png"
    with Phase(f"demo: drawing {figure}", enabled=base.progress):
        save_figure(plot_depth(pd.concat(tables, ignore_index=True), "align_mlp_mid"), figure)
    return {"probe": folders, "figures_alignment": str(figure)}
