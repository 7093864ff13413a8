"""Training tokens/s of a head-tapered model relative to uniform (issue 23): the same budget (parameters,
FLOPs and KV-cache bytes exactly equal), query heads tapered cosine 1.5 -> 0.5 in units of one GQA group.
Interleaved rounds (uniform, tapered, uniform, ...; the order alternates each round) of timed optimizer
steps on the same random batches, after warm-up steps; prints each round's tokens/s and the median of
the per-round ratios tapered / uniform.

    python -m analyses.head_taper_speed --threads 1 --rounds 7 --steps 8
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tlm_probe.models.accounting import count_params, kv_cache_bytes_per_token, train_flops_per_token
from tlm_probe.models.config import config_with_schedule
from tlm_probe.models.tlm import TaperedLM, next_token_nll
from tlm_probe.schedules.widths import parse_schedule


def build(args, heads: str | None):
    cfg = config_with_schedule(parse_schedule("uniform", 16), args.d_ff, heads=heads, d_model=args.d_model,
                               n_layers=args.layers, n_heads=args.heads, n_kv_heads=args.kv_heads,
                               vocab_size=args.vocab, max_seq_len=args.seq_len)
    torch.manual_seed(0)
    model = TaperedLM(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    return cfg, model, opt


def steps(model, opt, batches) -> float:
    """Seconds for one optimizer step per batch (forward, backward, clip, AdamW), as the trainer does."""
    t0 = time.perf_counter()
    for batch in batches:
        loss = next_token_nll(model(batch[:, :-1]), batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=8, help="timed optimizer steps per arm per round")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=0, help="0 = --heads (multi-head attention)")
    p.add_argument("--d-ff", type=int, default=256)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--schedule", default="cosine:1.5:0.5", help="the heads schedule")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    arms = {"uniform": build(args, None), "tapered": build(args, args.schedule)}
    u, t = arms["uniform"][0], arms["tapered"][0]
    layers = range(t.n_layers)
    print(f"heads tapered {[t.heads_at(l) for l in layers]}, kv {[t.kv_heads_at(l) for l in layers]}")
    same = (count_params(u).total == count_params(t).total,
            train_flops_per_token(u) == train_flops_per_token(t),
            kv_cache_bytes_per_token(u) == kv_cache_bytes_per_token(t))
    print(f"params {count_params(t).total:,}; equal params, FLOPs, KV bytes: {same}")
    g = torch.Generator().manual_seed(0)
    shape = (args.batch, args.seq_len + 1)
    batches = [torch.randint(0, args.vocab, shape, generator=g) for _ in range(args.steps)]
    for _, model, opt in arms.values():
        steps(model, opt, batches[:2])  # warm-up: allocator, kernels
    tokens = args.steps * args.batch * args.seq_len
    ratios = []
    for r in range(args.rounds):
        order = ["uniform", "tapered"] if r % 2 == 0 else ["tapered", "uniform"]
        speed = {name: tokens / steps(*arms[name][1:], batches) for name in order}
        ratios.append(speed["tapered"] / speed["uniform"])
        print(f"round {r}: uniform {speed['uniform']:,.0f} tok/s, tapered {speed['tapered']:,.0f} tok/s, "
              f"ratio {ratios[-1]:.3f}")
    print(f"median ratio tapered/uniform tokens/s: {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {args.rounds} rounds, {args.threads} thread(s))")


if __name__ == "__main__":
    main()
