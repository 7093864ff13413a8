"""What `tlm eval` costs on top of the model: the harness tasks and the perplexity pass against a plain
forward over exactly the same token batches.

    .venv/bin/python benchmarks/bench_eval.py [--model RUN_FOLDER] [--limit 50] [--ppl-tokens 16384]
        [--threads 1]

Without --model, a random model of the `tlm demo` size (d_model 128, 4 layers, byte-level, context 128).
Every batch the Scorer runs is recorded; the same batches are then replayed through the model's forward
alone (no harness, no tokenization, no log-softmax/gather). Prints the times and their ratio as JSON.
Model loading and imports are outside both timings.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import malloc


def demo_sized_model(folder: Path) -> Path:
    from tlm_probe.models.config import TLMConfig
    from tlm_probe.models.io import save_tlm
    from tlm_probe.models.tlm import TaperedLM
    from tlm_probe.tokenizer import ByteTokenizer

    torch.manual_seed(0)
    cfg = TLMConfig(d_model=128, n_layers=4, n_heads=4, d_ff=(512,) * 4, max_seq_len=128)
    save_tlm(TaperedLM(cfg), folder)
    ByteTokenizer().save(folder)
    return folder


def timed_eval(model: str, opts) -> tuple[float, list, object]:
    """Wall time of run_eval with a loaded scorer, and every (input_ids, attention_mask) it ran."""
    from tlm_probe.eval.run import load_scorer, run_eval

    scorer = load_scorer(model, opts)
    batches = []
    plain = scorer.logits

    def recording(ids, mask):
        batches.append((ids.clone(), mask.clone()))
        return plain(ids, mask)

    scorer.logits = recording
    started = time.perf_counter()
    run_eval(model, opts, scorer=scorer)
    return time.perf_counter() - started, batches, scorer


@torch.no_grad()
def timed_forward(scorer, batches) -> float:
    started = time.perf_counter()
    for ids, mask in batches:
        scorer.pm.forward(ids, mask)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="")
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--ppl-tokens", type=int, default=16_384)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    malloc.add_option(ap)
    args = ap.parse_args()
    malloc.apply(args)
    from tlm_probe.eval.run import EvalOptions

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(demo_sized_model(Path(tmp) / "demo-sized"))
        out = {"model": args.model or "random, demo size", "threads": torch.get_num_threads()}
        cases = {
            "harness": EvalOptions(tasks=["pydoc-mc", "pydoc-lastword"], limit=args.limit,
                                   batch_size=args.batch_size),
            "perplexity": EvalOptions(ppl_data=["builtin:pydoc"], max_tokens=args.ppl_tokens,
                                      batch_size=args.batch_size),
        }
        for name, opts in cases.items():
            timed_eval(model, opts)  # warm-up: datasets cache, first-call allocations
            seconds, batches, scorer = timed_eval(model, opts)
            forward = min(timed_forward(scorer, batches) for _ in range(2))
            out[name] = {
                "eval_s": round(seconds, 3),
                "forward_s": round(forward, 3),
                "ratio": round(seconds / forward, 2),
                "batches": len(batches),
                "tokens": int(sum(int(m.sum()) for _, m in batches)),
            }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
