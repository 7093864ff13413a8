"""The device the GPU scripts (gpu_probe.py, gpu_train.py) run on, and how they wait for it: shared here so
that neither script imports the other for it."""

from __future__ import annotations

import sys

import torch


def pick_device(asked: str) -> str:
    """cpu | cuda from --device (auto: cuda when torch sees one); --device cuda without one exits 1."""
    if asked == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if asked == "cuda":
        print("error: --device cuda but torch sees no CUDA device; run with --device cpu", file=sys.stderr)
        raise SystemExit(1)
    print("no CUDA device: running on the CPU; these are CPU figures, not GPU ones", file=sys.stderr)
    return "cpu"


def sync(device: str) -> None:
    """Wait for the device's queued work (timings must not end before it does)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
