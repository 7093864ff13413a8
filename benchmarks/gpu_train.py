"""The trainer's GPU path, checked end to end (issue 24), through the trainer's own code (train/loop.py's
Trainer: its model, optimizer, autocast, per-block compile and train_step), prepared for a GPU machine:

    python -m benchmarks.gpu_train --device cuda            # the figures on a GPU (what it is written for)
    python -m benchmarks.gpu_train --device cpu --quick     # tiny configs on CPU (how the tests run it)
    python -m benchmarks.gpu_probe --device cuda            # the probe's checks, then these

It prints and writes to --out (JSON):
1. step: the tlm-440m preset, uniform against cosine:1.5:0.5 (parameters and training FLOPs per token from
   tlm_probe.models.accounting: equal by construction), each arm's step time over interleaved rotated rounds,
   tokens/s and MFU (FLOPs/token x tokens/s / the device's peak; --peak-flops, or loop.PEAK_FLOPS by GPU
   name; on a CPU its measured matmul peak), the per-round step-time ratio cosine / uniform, and each
   arm's peak device memory;
2. bf16: the same model, seed and batches trained 50 steps with bf16 autocast and in float32; the largest
   |loss difference| at the same weights (one bf16 forward on the float32 arm's weights each step) and
   along the two free-running trajectories, each against its bound (numerics.py says why);
3. compile: per-block torch.compile (train/compile.py) against eager on a tapered model: loss and every
   gradient at the same weights for 3 steps within a float32 bound, compile seconds and step times;
4. the fused kernels the path relies on: the fused AdamW, SDPA's flash kernel on the training attention.
Peak memory is CUDA's max_memory_allocated ("n/a on CPU"). Nothing here is a GPU figure until it has been
run on one: this project has not had a GPU machine so far.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.gpu_device import pick_device, sync
from benchmarks.gpu_numerics import bf16_agreement, compile_equality
from benchmarks.timing import interleaved, ratio, rounds_note, spread
from tlm_probe.data.stream import TokenData
from tlm_probe.models.accounting import count_params, train_flops_per_token
from tlm_probe.train.config import TrainConfig
from tlm_probe.train.loop import Trainer, peak_flops
from tlm_probe.train.run import plan_run

ARMS = ("uniform", "cosine:1.5:0.5")
NA_CPU = "n/a on CPU"
# inductor is what --compile uses; on CPU its C++ kernels take minutes to build on a small shared machine,
# so the CPU run defaults to aot_eager (Dynamo + AOTAutograd's graphs, eager kernels): --compile-backend
DEFAULT_BACKEND = {True: "inductor", False: "aot_eager"}
TINY = dict(d_model=32, n_layers=3, n_heads=2, d_ff=128, multiple_of=32, seq_len=16, batch_size=2)
# sizes: the step check (the 440M preset at its 4K context, 8k tokens a step: two arms' weights, AdamW state
# and 128k-vocabulary logits fit an 80 GB GPU), the bf16 check (the preset, 4k tokens a
# step: its float32 arm runs without tensor cores), the compile check (the preset's widths, 3 tapered
# layers: compile time grows with the number of distinct block shapes, 22 for the preset's 24 layers)
SIZES = {
    False: dict(step=dict(preset="tlm-440m", seq_len=4096, batch_size=2),
                bf16=dict(preset="tlm-440m", seq_len=1024, batch_size=4),
                compile=dict(preset="tlm-440m", n_layers=3, seq_len=2048, batch_size=4),
                vocab=128_256, rounds=10, bf16_steps=50),
    True: dict(step=TINY, bf16=TINY, compile=TINY, vocab=256, rounds=3, bf16_steps=50),
}  # fmt: skip


class Arms:
    """Trainers on one synthetic token stream (uniform random ids: a loss near ln V, which is all these
    checks need), each in its own folder under `root`."""

    def __init__(self, root: Path, vocab: int, device: str):
        self.root, self.vocab, self.device = root, vocab, device
        ids = np.random.default_rng(0).integers(0, vocab, size=2_000_000, dtype=np.int64).astype(np.uint32)
        self.data = TokenData(ids[:1_900_000], ids[1_900_000:], None, "random", vocab)

    def trainer(self, name: str, size: dict, steps: int, **kw) -> Trainer:
        tc = TrainConfig(**size, steps=steps, device=self.device, progress=False, eval_interval=10**9,
                         eval_tokens=size["seq_len"] * 2, **kw)  # fmt: skip
        return Trainer(plan_run(tc, self.root / name, data=self.data, overwrite=True), overwrite=True)


def step_arm(tr: Trainer, device: str):
    def run():
        tr.train_step()
        sync(device)

    return run


def peak_memory(tr: Trainer, device: str) -> dict | str:
    """One more step of this arm: the most memory allocated on the device during it, what was allocated
    before it (every live arm's weights and AdamW state), and the difference (this step's own)."""
    if not device.startswith("cuda"):
        return NA_CPU
    sync(device)
    resident = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step_arm(tr, device)()
    peak, gib = torch.cuda.max_memory_allocated(), 2**30
    return {"peak_gib": peak / gib, "before_step_gib": resident / gib, "step_gib": (peak - resident) / gib}


def step_check(arms: Arms, size: dict, rounds: int, peak: float | None) -> dict:
    """Uniform vs cosine:1.5:0.5 at the step size: step times in interleaved rotated rounds."""
    trainers = {s: arms.trainer(s.replace(":", "_"), size["step"], rounds + 10, schedule=s) for s in ARMS}
    t = interleaved({s: step_arm(tr, arms.device) for s, tr in trainers.items()}, rounds, warmup=3)
    out: dict = {}
    for s, tr in trainers.items():
        cfg = tr.plan.cfg
        med = spread(t[s])["median"]
        tps = tr.tc.tokens_per_step / med
        out[s] = {"d_ff": list(cfg.d_ff), "params": count_params(cfg).total,
                  "flops_per_token": train_flops_per_token(cfg, tr.tc.seq_len),
                  "step_s": spread(t[s]), "tokens_per_s": tps,
                  "mfu": tps * tr.flops_per_token / peak if peak else "n/a (no peak FLOP/s: --peak-flops)",
                  "fused_adamw": bool(tr.opt.defaults.get("fused")),
                  "memory": peak_memory(tr, arms.device)}  # fmt: skip
    a, b = out[ARMS[1]], out[ARMS[0]]
    out["same params and FLOPs/token"] = all(a[k] == b[k] for k in ("params", "flops_per_token"))
    out["step time, cosine / uniform"] = ratio(t, ARMS[1], ARMS[0])
    out["tokens_per_step"] = trainers[ARMS[0]].tc.tokens_per_step
    return out


def flash_check(arms: Arms, size: dict) -> dict | str:
    """SDPA restricted to its flash kernel, on a training forward in bf16 autocast (causal, no mask): it
    raises when the kernel cannot take these inputs, where SDPA would otherwise fall back silently."""
    if not arms.device.startswith("cuda"):
        return NA_CPU
    from torch.nn.attention import SDPBackend, sdpa_kernel

    tr = arms.trainer("flash", size["compile"], 1)
    batch = tr.order.micro_batch(0, 0, 0, tr.tc.batch_size, 1, 1).to(tr.device)
    try:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]), tr.autocast(), torch.no_grad():
            tr.model(batch[:, :-1])
    except RuntimeError as e:  # the one-kernel context raises "No available kernel" with the reasons
        return {"ok": False, "error": str(e).splitlines()[0][:300]}
    return {"ok": True}


def run(device: str, quick: bool, peak_given: float = 0.0, backend: str | None = None) -> dict:
    size = SIZES[quick]
    backend = backend or DEFAULT_BACKEND[device.startswith("cuda")]
    peak = peak_flops(peak_given, torch.device(device))
    started = time.time()
    res: dict = {"device": device, "gpu": torch.cuda.get_device_name() if device.startswith("cuda") else None,
                 "peak_flops": peak, "torch": torch.__version__,
                 "rounds": rounds_note(size["rounds"])}  # fmt: skip
    threads = torch.get_num_threads()
    if device == "cpu":  # tiny models, a smoke run: one thread (on a shared machine more only wait)
        torch.set_num_threads(1)
    try:
        res.update(_checks(device, size, peak, backend))
    finally:
        torch.set_num_threads(threads)
    res["seconds"] = round(time.time() - started, 1)
    return res


def _checks(device: str, size: dict, peak: float | None, backend: str) -> dict:
    res: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        arms = Arms(Path(tmp), size["vocab"], device)
        for name, check in (("step", lambda: step_check(arms, size, size["rounds"], peak)),
                            ("bf16", lambda: bf16_agreement(arms, size["bf16"], size["bf16_steps"])),
                            ("compile", lambda: compile_equality(arms, size["compile"], backend)),
                            ("sdpa_flash", lambda: flash_check(arms, size))):  # fmt: skip
            t = time.time()
            res[name] = check()
            res[f"{name}_seconds"] = round(time.time() - t, 1)
            _free(device)
    return res


def _free(device: str) -> None:
    import gc

    gc.collect()  # the arms of a check are gone once it returns: their weights leave the device
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_train", description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--quick", action="store_true", help="tiny models: a smoke run (CPU)")
    ap.add_argument("--peak-flops", type=float, default=0.0, help="the device's peak FLOP/s for the MFU")
    ap.add_argument("--compile-backend", default=None,
                    help="torch.compile backend (default: inductor on CUDA, aot_eager on CPU)")
    ap.add_argument("--out", type=Path, default=Path("gpu_train.json"))
    args = ap.parse_args(argv)
    device = pick_device(args.device)
    res = run(device, args.quick, args.peak_flops, args.compile_backend)
    print(json.dumps(res, indent=2))
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
