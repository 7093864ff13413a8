"""`tlm probe` and `tlm diff` under torchrun: which rank this process is, and the gloo group its sums are
reduced over.

Each rank streams the sequences i % world == rank (data.sequences.shard); every state of a probe or a
diff is a sum (the statistics' moments, Gram sums, drift sums, token sums), all-reduced with one SUM, so
two ranks give one process's numbers up to the order of float64 additions. Only rank 0 writes. (Training
has its own process group, with NCCL on GPUs: train/distributed.py.)"""

from __future__ import annotations

import contextlib
import os


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank_device(device: str) -> str:
    """Under torchrun, plain "cuda" means this rank's GPU."""
    return f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if device == "cuda" and world() > 1 else device


@contextlib.contextmanager
def process_group():
    """A gloo group for the time inside when WORLD_SIZE > 1 and none exists yet (the reduced states are
    small CPU tensors: gloo everywhere); one that exists (the caller's) is used and left open."""
    if world() <= 1:
        yield
        return
    import torch.distributed as dist

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo")
    try:
        yield
    finally:
        if created:
            dist.destroy_process_group()
