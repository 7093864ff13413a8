"""Devices: resolve "auto" and check that a requested device exists here, before anything is written."""

from __future__ import annotations

import torch

from tlm_probe.errors import UserError


def check_device(device: str) -> None:
    """A one-line error instead of a CUDA traceback when the device does not exist here."""
    if device == "auto":
        return
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise UserError(f"unknown device {device!r}: {e}") from e
    available = {"cpu": lambda: True, "cuda": torch.cuda.is_available, "mps": torch.backends.mps.is_available}
    if not available.get(dev.type, lambda: False)():
        raise UserError(f"device {device!r} is not available on this machine (use --device cpu or auto)")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UserError(f"device {device!r} does not exist ({torch.cuda.device_count()} CUDA devices)")


def resolve_device(name: str) -> torch.device:
    check_device(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_device_name(name: str) -> str:
    """The device a run uses, as a name: 'auto' becomes cuda or cpu; any other name is checked and kept."""
    resolved = resolve_device(name)
    return str(resolved) if name == "auto" else name
