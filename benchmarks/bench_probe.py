"""Benchmark the probe: overhead of the native backend against a plain forward pass, speed against
TransformerLens run_with_cache (every hook cached, the default) + the same statistics, and peak memory
from 10k to 500k probed tokens. Prints ratios (medians over repeats) and a JSON line.

    .venv/bin/python benchmarks/bench_probe.py                 # the issue's setting (takes minutes)
    .venv/bin/python benchmarks/bench_probe.py --quick         # a smoke run
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch


def gpt2_folder(folder: Path, layers: int, d_model: int, ctx: int) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=layers, n_embd=d_model, n_head=max(1, d_model // 64), n_positions=ctx)
    GPT2LMHeadModel(cfg).eval().save_pretrained(folder)
    return folder


def timed_interleaved(fns: dict, repeats: int) -> dict:
    """Median seconds of each fn over repeats; one warm-up each, then rounds that run every fn once, so
    that load from other processes on a shared machine hits all of them alike."""
    for fn in fns.values():
        fn()
    SINK_SECONDS.update({False: 0.0, True: 0.0})  # steady state: the warm-up did the first-batch checks
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def _sink(pm):
    from tlm_probe.capture.sink import StatSink
    from tlm_probe.stats import build_accumulators

    return StatSink(pm, build_accumulators("alignment", pm.n_layers, pm.d_ff))


def _native(pm, ids, mask, full: bool):
    from tlm_probe.capture.native import NativeBackend
    from tlm_probe.stats import TokenIndex

    sink = _sink(pm)
    backend = NativeBackend(sink)
    inner = sink.on_layer

    def timed_on_layer(layer, raw):  # time spent in the statistics, measured directly: less load noise
        t = time.perf_counter()
        inner(layer, raw)
        SINK_SECONDS[full] += time.perf_counter() - t

    sink.on_layer = timed_on_layer

    def run():
        sink.start_batch(TokenIndex(mask))
        backend.run(ids, mask, full_output=full)
        sink.end_batch()

    return run


SINK_SECONDS = {False: 0.0, True: 0.0}


def _tl_cache_all(pm, ids, mask):
    """What a TransformerLens user does by default: cache every hook, then compute the statistics."""
    from tlm_probe.capture.tl_backend import TL_NAMES, _boot_bridge
    from tlm_probe.stats import TokenIndex

    bridge = _boot_bridge(pm)
    sink = _sink(pm)
    names = TL_NAMES[pm.block_kind]

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, cache = bridge.run_with_cache(ids, attention_mask=mask)
        sink.start_batch(TokenIndex(mask))
        for l in range(pm.n_layers):
            sink.on_layer(l, {p: cache[f"blocks.{l}.{names[p]}"] for p in sink.pieces})
        sink.end_batch()

    return run


def speed(folder: Path, batch: int, seq: int, repeats: int) -> dict:
    from tlm_probe.capture import load_probe_model

    pm = load_probe_model(folder)
    ids = torch.randint(0, pm.vocab_size, (batch, seq))
    mask = torch.ones_like(ids)
    tl_pm = load_probe_model(folder)  # the bridge switches its model to eager attention
    with torch.inference_mode():
        fns = {
            "forward_full_s": lambda: pm.forward(ids, mask),
            "forward_blocks_s": lambda: pm.forward_base(ids, mask),
            "native_probe_s": _native(pm, ids, mask, full=False),
            "native_probe_full_s": _native(pm, ids, mask, full=True),
            "tl_cache_all_s": _tl_cache_all(tl_pm, ids, mask),
        }
        out = timed_interleaved(fns, repeats)
    out["statistics_s_per_batch"] = SINK_SECONDS[False] / repeats  # the sink ran once per timed call
    return out


def memory_run(folder: str, tokens: int, seq: int, batch: int) -> None:
    """One probe of `tokens` random token ids in this process; prints the peak RSS in MiB."""
    from tlm_probe.probe import probe

    torch.set_num_threads(2)
    ids = np.random.default_rng(0).integers(0, 50257, tokens).astype(np.uint32)
    df = probe(folder, ids, seq_len=seq, batch_size=batch, max_tokens=None)
    assert int(df.n_tokens.max()) == tokens, "the probe did not see every token"
    print(peak_rss_mib())


def peak_rss_mib() -> float:
    """VmHWM of this address space. (Not ru_maxrss: Linux carries it over from the parent across
    fork + exec, so a child would report the benchmark parent's peak.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory(folder: Path, tokens: int, seq: int, batch: int) -> float:
    cmd = [
        sys.executable,
        __file__,
        "--memory-run",
        str(folder),
        "--tokens",
        str(tokens),
        "--seq",
        str(seq),
        "--batch",
        str(batch),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return float(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, a smoke run")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--memory-run", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--tokens", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--small-tokens", type=int, default=10_000)
    ap.add_argument("--large-tokens", type=int, default=500_000)
    ap.add_argument("--no-memory", action="store_true", help="skip the (slow) peak-memory runs")
    args = ap.parse_args()
    if args.memory_run:
        return memory_run(args.memory_run, args.tokens, args.seq, args.batch)
    torch.set_num_threads(2)
    logging.disable(logging.WARNING)
    layers, d_model = (2, 64) if args.quick else (6, 256)
    if args.quick:
        args.seq, args.batch, args.small_tokens, args.large_tokens, args.repeats = 64, 4, 1000, 5000, 2
    folder = gpt2_folder(Path(tempfile.mkdtemp()) / "gpt2", layers, d_model, max(args.seq, 256))
    s = speed(folder, args.batch, args.seq, args.repeats)
    small = float("nan") if args.no_memory else memory(folder, args.small_tokens, args.seq, args.batch)
    large = float("nan") if args.no_memory else memory(folder, args.large_tokens, args.seq, args.batch)
    res = {
        **{k: round(v, 4) for k, v in s.items()},
        "overhead_vs_full_forward": s["native_probe_s"] / s["forward_full_s"],
        "overhead_vs_blocks_forward": s["native_probe_s"] / s["forward_blocks_s"],
        "overhead_with_head_vs_full_forward": s["native_probe_full_s"] / s["forward_full_s"],
        "speedup_vs_tl_cache_all": s["tl_cache_all_s"] / s["native_probe_s"],
        "speedup_with_head_vs_tl_cache_all": s["tl_cache_all_s"] / s["native_probe_full_s"],
        "statistics_share_of_blocks_forward": s["statistics_s_per_batch"] / s["forward_blocks_s"],
        "peak_rss_mib_small": small,
        "peak_rss_mib_large": large,
        "memory_growth": large / small - 1,
    }
    print(
        f"GPT-2 shape: {layers} layers, d_model {d_model}, batch {args.batch} x {args.seq}, 2 threads, "
        f"median of {args.repeats}"
    )
    print(
        f"  time inside the statistics per batch: {s['statistics_s_per_batch'] * 1000:.1f} ms = "
        f"{100 * res['statistics_share_of_blocks_forward']:.1f}% of the blocks' forward pass"
    )
    for k in (
        "overhead_vs_blocks_forward",
        "overhead_with_head_vs_full_forward",
        "overhead_vs_full_forward",
        "speedup_vs_tl_cache_all",
        "speedup_with_head_vs_tl_cache_all",
    ):
        print(f"  {k:40s} {res[k]:.3f}x")
    print(
        f"  peak RSS {small:.0f} MiB at {args.small_tokens:,} tokens, "
        f"{large:.0f} MiB at {args.large_tokens:,} tokens: growth {100 * res['memory_growth']:+.1f}%"
    )
    print(json.dumps(res))


if __name__ == "__main__":
    main()
