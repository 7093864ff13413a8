"""Training throughput of the trainer's step (forward, backward, clip, AdamW) on CPU.

    .venv/bin/python benchmarks/bench_train.py [--d-model 128 --layers 4 --batch 12 --seq-len 64 --steps 30]
        [--threads N]   (0 = PyTorch's default; on a machine shared with other jobs 1 thread is often faster)

Prints the median tokens/s over timed steps (after warm-up), for a uniform and a cosine-tapered model of
the same budget, plus the accounting's training FLOPs per token and the implied FLOP/s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from tlm_probe.accounting import train_flops_per_token
from tlm_probe.data.stream import TokenData
from tlm_probe.tokenizer import ByteTokenizer
from tlm_probe.train.config import TrainConfig
from tlm_probe.train.loop import Trainer
from tlm_probe.train.run import plan_run


def bench(schedule: str, args, out) -> dict:
    ids = np.random.default_rng(0).integers(0, 256, size=200_000).astype(np.uint32)
    data = TokenData(ids[:190_000], ids[190_000:], ByteTokenizer(), "random", 256)
    tc = TrainConfig(
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        d_ff=4 * args.d_model,
        schedule=schedule,
        seq_len=args.seq_len,
        batch_size=args.batch,
        steps=args.steps + 5,
        eval_tokens=args.seq_len,
        progress=False,
    )
    trainer = Trainer(
        plan_run(tc, out / schedule.replace(":", "_"), data=data, overwrite=True), overwrite=True
    )
    times = []
    if args.threads:
        torch.set_num_threads(args.threads)
    for _ in range(args.steps + 5):
        t = time.perf_counter()
        trainer.train_step()
        times.append(time.perf_counter() - t)
    per_step = statistics.median(times[5:])  # the first steps pay for allocation
    tps = args.batch * args.seq_len / per_step
    flops = train_flops_per_token(trainer.plan.cfg, args.seq_len)
    return {
        "schedule": schedule,
        "tokens_per_s": round(tps),
        "step_ms": round(per_step * 1e3, 2),
        "flops_per_token": flops,
        "achieved_flops": tps * flops,
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    import tempfile
    from pathlib import Path

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [bench(s, args, Path(tmp)) for s in ("uniform", "cosine:1.5:0.5")]
    for r in rows:
        print(json.dumps(r))
    print(f"ratio cosine/uniform tokens/s: {rows[1]['tokens_per_s'] / rows[0]['tokens_per_s']:.3f}")


if __name__ == "__main__":
    main()
