"""How fast can this CPU train the study's model? Interleaved, rotated rounds of optimizer steps for each
trainer variant (fp32 eager = today's trainer; fused AdamW; bf16 autocast; torch.compile; combinations),
printing tokens/s, per-round ratios to today's trainer (min/median/max) and the training loss each variant
reaches from the same initial weights on the same batches (so a speed-up that changes the loss shows).

    python -m analyses.train_speed --threads 1 --rounds 5 --steps 6 --out analyses/results/train_speed.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path

import torch

from tlm_probe.models.config import config_with_schedule
from tlm_probe.models.tlm import TaperedLM, next_token_nll
from tlm_probe.schedules.widths import parse_schedule

VARIANTS = {
    # name: (optimizer kwargs, autocast dtype or None, compile)
    "today: fp32 + foreach AdamW": ({"foreach": True}, None, False),
    "fused AdamW": ({"fused": True}, None, False),
    "bf16 autocast": ({"foreach": True}, torch.bfloat16, False),
    "torch.compile": ({"foreach": True}, None, True),
    "compile + fused": ({"fused": True}, None, True),
    "compile + bf16": ({"foreach": True}, torch.bfloat16, True),
}


def build(args, opt_kwargs: dict, compile_: bool):
    spec = parse_schedule(args.schedule, 32)
    cfg = config_with_schedule(
        spec, args.d_ff, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
        vocab_size=args.vocab, max_seq_len=args.seq_len,
    )
    torch.manual_seed(0)
    model = TaperedLM(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1, **opt_kwargs)
    run = torch.compile(model) if compile_ else model
    return run, model, opt


def step(run, model, opt, batch, dtype) -> float:
    ctx = torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()
    with ctx:
        logits = run(batch[:, :-1])
        loss = next_token_nll(logits, batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=6, help="optimizer steps per variant per round")
    p.add_argument("--loss-steps", type=int, default=60, help="steps for the loss check (0 = skip)")
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=384)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--schedule", default="cosine:1.5:0.5")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--data", help="a `tlm data prepare` folder: real batches (default: random tokens)")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    names = [v for v in args.variants.split(",") if v]
    batches = make_batches(args, max(4, args.loss_steps))
    built = {n: build(args, VARIANTS[n][0], VARIANTS[n][2]) for n in names}
    for n in names:  # warm-up: compilation and allocator
        for b in batches[:2]:
            step(*built[n], b, VARIANTS[n][1])
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[: r % len(names)]  # rotate the order every round
        for n in order:
            t0 = time.perf_counter()
            for i in range(args.steps):
                step(*built[n], batches[i % len(batches)], VARIANTS[n][1])
            times[n].append(time.perf_counter() - t0)
    tok = args.batch * args.seq_len * args.steps
    base = names[0]
    report = {"config": vars(args) | {"out": str(args.out)}, "variants": {}}
    for n in names:
        # speed-up against today's trainer, round by round
        ratios = [tb / tn for tb, tn in zip(times[base], times[n], strict=True)]
        report["variants"][n] = {
            "tokens_per_s_median": tok / statistics.median(times[n]),
            "speedup_min": min(ratios),
            "speedup_median": statistics.median(ratios),
            "speedup_max": max(ratios),
        }
    if args.loss_steps:
        report["loss"] = loss_check(args, names, batches)
    for n, v in report["variants"].items():
        loss = report.get("loss", {}).get(n)
        print(f"{n:30s} {v['tokens_per_s_median']:8.0f} tok/s  speed-up {v['speedup_median']:.2f}x "
              f"(min {v['speedup_min']:.2f}, max {v['speedup_max']:.2f})"
              + (f"  loss after {args.loss_steps} steps {loss:.4f}" if loss is not None else ""))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


def make_batches(args, n: int) -> list[torch.Tensor]:
    """n batches of (batch, seq_len + 1) ids: the trainer's own batch order on real data, or random ids."""
    if not args.data:
        g = torch.Generator().manual_seed(1)
        return [torch.randint(0, args.vocab, (args.batch, args.seq_len + 1), generator=g) for _ in range(n)]
    from tlm_probe.data.stream import BatchOrder, load_token_data

    data = load_token_data(args.data)
    args.vocab = data.vocab_size
    order = BatchOrder(data.train, args.seq_len, seed=0)
    return [torch.as_tensor(order.micro_batch(i, 0, 0, args.batch, 1, 1)).long() for i in range(n)]


def loss_check(args, names, batches) -> dict:
    """Train each variant from the same weights on the same batches; mean loss of the last 5 steps."""
    out = {}
    for n in names:
        run, model, opt = build(args, VARIANTS[n][0], VARIANTS[n][2])
        dtype = VARIANTS[n][1]
        losses = [step(run, model, opt, batches[i % len(batches)], dtype) for i in range(args.loss_steps)]
        out[n] = statistics.fmean(losses[-5:])
    return out


if __name__ == "__main__":
    main()
