"""Training throughput as ratios: the cosine-tapered arm against the uniform arm (same budget), their
steps interleaved and rotated at the same thread count; and a whole short run's end-to-end rate
(evaluations, checkpoints, start-up included) against the step-only rate that run.json reports.

    python -m benchmarks.bench_train [--quick] [--threads 1] [--rounds N]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from benchmarks import section
from benchmarks.timing import interleaved, line, ratio, spread
from tlm_probe.data.stream import TokenData
from tlm_probe.tokenizer import ByteTokenizer
from tlm_probe.train.config import TrainConfig
from tlm_probe.train.loop import Trainer
from tlm_probe.train.run import plan_run


def _data() -> TokenData:
    ids = np.random.default_rng(0).integers(0, 256, size=200_000).astype(np.uint32)
    return TokenData(ids[:190_000], ids[190_000:], ByteTokenizer(), "random", 256)


def _config(schedule: str, size: dict, steps: int, threads: int) -> TrainConfig:
    return TrainConfig(
        **size,
        schedule=schedule,
        steps=steps,
        eval_tokens=size["seq_len"] * 4,
        eval_interval=max(1, steps // 2),
        progress=False,
        threads=threads,
    )


def arms(size: dict, rounds: int, threads: int, out: Path) -> dict:
    trainers = {
        s: Trainer(plan_run(_config(s, size, rounds + 5, threads), out / s.replace(":", "_"), data=_data(),
                            overwrite=True), overwrite=True)
        for s in ("uniform", "cosine:1.5:0.5")
    }
    torch.set_num_threads(threads)
    fns = {s: t.train_step for s, t in trainers.items()}
    t = interleaved(fns, rounds, warmup=3)
    return {"train step time, cosine 1.5->0.5 / uniform (same budget)": ratio(t, "cosine:1.5:0.5", "uniform")}


def end_to_end(size: dict, steps: int, threads: int, out: Path, repeats: int) -> dict:
    """Whole runs (run.json): end-to-end tokens/s over the step-only tokens/s, one value per run."""
    ratios = []
    for i in range(repeats):
        folder = out / f"e2e{i}"
        Trainer(plan_run(_config("uniform", size, steps, threads), folder, data=_data(), overwrite=True),
                overwrite=True).run()
        doc = json.loads((folder / "run.json").read_text())
        e2e = doc.get("end_to_end_tokens_per_s") or doc["tokens"] / doc["wall_s"]
        ratios.append(e2e / doc["tokens_per_s"])
    return {"trainer end-to-end tokens/s / step-only tokens/s": spread(ratios)}


SIZES = {  # size, step rounds, steps per whole run, whole runs (quick: a smoke run, timing.line says so)
    True: (dict(d_model=64, n_layers=2, n_heads=2, d_ff=256, batch_size=8, seq_len=64), 8, 12, 2),
    False: (dict(d_model=128, n_layers=4, n_heads=4, d_ff=512, batch_size=12, seq_len=64), 30, 40, 7),
}


def run(quick: bool, workdir: Path, rounds: int | None = None) -> dict:
    """Both arms at the thread count torch has now (the caller sets it)."""
    size, default_rounds, steps, repeats = SIZES[quick]
    threads = torch.get_num_threads()
    out = arms(size, rounds or default_rounds, threads, workdir)
    out.update(end_to_end(size, steps, threads, workdir, repeats))
    return out


def report(results: dict) -> list[str]:
    return [line(k, v) for k, v in results.items()]


def main() -> None:
    section.main(sys.modules[__name__])


if __name__ == "__main__":
    main()
