"""The CPU's matmul peak, measured, so that a CPU run reports an MFU too (issue 34): the best of a few
float32 square matmuls (1024 wide) with the threads the run uses, in FLOP/s. About 0.3 s the first time;
cached on disk (tlm_probe.files.disk_cache) per CPU model, thread count and torch version, so later runs
read it. It is this machine's achievable dense rate, not a datasheet number: MFU against it says how much
of what the CPU can do here a training step uses."""

from __future__ import annotations

import json
import time

import torch

from tlm_probe.environment import cpu_name
from tlm_probe.files import disk_cache

SIZE, ROUNDS = 1024, 5


def measure() -> float:
    """FLOP/s of the best of ROUNDS float32 SIZE x SIZE matmuls (2·n³ FLOPs each)."""
    a, b = torch.randn(SIZE, SIZE), torch.randn(SIZE, SIZE)
    a @ b  # warm the kernels and the allocator
    best = float("inf")
    for _ in range(ROUNDS):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * SIZE**3 / best


def cpu_peak_flops() -> float:
    """The measured peak, from the disk cache when this CPU, thread count and torch were measured before."""
    key = json.dumps({"cpu": cpu_name(), "threads": torch.get_num_threads(), "torch": torch.__version__,
                      "size": SIZE})
    entry = f"cpu-peak-{disk_cache.key_digest(key)}.json"
    cached = disk_cache.read(entry, key)
    if cached is not None:
        try:
            return float(json.loads(cached.decode()))
        except ValueError:
            pass
    peak = measure()
    disk_cache.write(entry, key, json.dumps(peak).encode())
    return peak
