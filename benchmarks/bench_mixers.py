"""Forward+backward throughput of each token mixer relative to attention at the same size, and Titans'
chunk-parallel memory relative to its token-by-token reference.

    .venv/bin/python benchmarks/bench_mixers.py [--d-model 128 --layers 4 --heads 4 --batch 8
        --seq-len 128 --rounds 7 --threads 1 --device cpu --json]

Models: the same d_model / layers / heads / mean MLP width for every mixer (Titans also carries its memory
layer, so it is larger; the parameter counts are printed, with each one relative to attention's).
Rounds are interleaved (one timed step of every
mixer per round, so machine load hits them alike) and the median over rounds is reported. Titans
(benchmarks/titans_parts.py): forward+backward of its chunk-parallel memory (models.memory.memory_chunked)
against the token-by-token reference (memory_reference) on block 0's real memory inputs at init (B·H
memories), as the median of per-round ratios, and the Titans step split into memory update, memory
projections, sliding-window attention, MLP and the rest.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from benchmarks import malloc, titans_parts
from tlm_probe.models.accounting import count_params
from tlm_probe.models.config import config_with_schedule
from tlm_probe.models.mixer_registry import MIXERS
from tlm_probe.models.tlm import TaperedLM


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device) -> float:
    _sync(device)
    t = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t


def bench_mixers(args, device) -> tuple[list[dict], TaperedLM, torch.Tensor]:
    """Rows per mixer, and the Titans model with the batch (for titans_parts)."""
    models, steps = {}, {}
    x = torch.randint(0, 256, (args.batch, args.seq_len), device=device)
    for mixer in MIXERS:
        torch.manual_seed(0)
        cfg = config_with_schedule("uniform", 4 * args.d_model, vocab_size=256, d_model=args.d_model,
                                   n_layers=args.layers, n_heads=args.heads, max_seq_len=args.seq_len,
                                   mixer=mixer, mem_chunk=args.chunk)
        models[mixer] = (cfg, TaperedLM(cfg).to(device).train())

        def step(model=models[mixer][1]):
            model.zero_grad(set_to_none=True)
            model(x, return_type="loss").backward()

        steps[mixer] = step
    times = {m: [] for m in MIXERS}
    for r in range(args.rounds + 1):  # round 0 warms up (allocation, kernels)
        for mixer in MIXERS:
            dt = _timed(steps[mixer], device)
            if r:
                times[mixer].append(dt)
    tokens = args.batch * args.seq_len
    base = tokens / statistics.median(times["attention"])
    base_params = count_params(models["attention"][0]).total
    rows = []
    for mixer in MIXERS:
        tps = tokens / statistics.median(times[mixer])
        params = count_params(models[mixer][0]).total
        rows.append({"mixer": mixer, "params": params, "params_relative": params / base_params,
                     "tokens_per_s": tps, "step_s": statistics.median(times[mixer]),
                     "relative_to_attention": tps / base})
    return rows, models["titans"][1], x


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--chunk", type=int, default=16, help="Titans memory chunk size.")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--memory-rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="CPU threads (0 = PyTorch's default).")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", action="store_true")
    malloc.add_option(p)
    args = p.parse_args()
    malloc.apply(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rows, titans, x = bench_mixers(args, device)
    result = {"config": vars(args), "mixers": rows,
              **titans_parts.bench_titans(titans, x, args.rounds, args.memory_rounds)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"forward+backward, B={args.batch} T={args.seq_len} d={args.d_model} L={args.layers} "
          f"({args.device}, median of {args.rounds} interleaved rounds)")
    for row in result["mixers"]:
        print(f"  {row['mixer']:>16}: {row['tokens_per_s']:>10,.0f} tok/s  "
              f"x{row['relative_to_attention']:.3f} of attention  ({row['params']:,} params, "
              f"x{row['params_relative']:.3f})")
    m, s = result["memory"], result["memory"]["speedup"]
    print(f"Titans memory ({m['memories']} memories x {m['tokens']} tokens, chunk {m['chunk']}, fwd+bwd): "
          f"chunk-parallel {m['chunked_s'] * 1e3:.1f} ms, token-by-token reference "
          f"{m['reference_s'] * 1e3:.1f} ms: x{s['median']:.1f} (median of {s['rounds']} interleaved rounds' "
          f"ratios; min {s['min']:.1f}, max {s['max']:.1f})")
    print(f"Titans step {result['step_s'] * 1e3:.0f} ms (median of {args.rounds} interleaved rounds):")
    for part, secs in result["breakdown_s"].items():
        print(f"  {part:>20}: {secs * 1e3:8.1f} ms  {result['breakdown_share'][part]:6.1%}")


if __name__ == "__main__":
    main()
