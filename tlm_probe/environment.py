"""Where a result was computed: the software (`versions`) and the arithmetic (`machine`), recorded beside
every training run, probe and evaluation.

Why the machine: floating point is not the same everywhere. Re-training a run of the confirmatory study with
its own code, the same torch (2.13.0+cpu) and the same data gave a gradient norm one float32 unit apart at
step 30, and the losses parted from step 70 (analyses/results/confirm/rescore/check_*.json). Most likely
the machine differed: the kernels torch picks depend on the CPU's instruction set (ATEN_CPU_CAPABILITY).
That run recorded neither the CPU nor the commit, so this cannot be confirmed. A bit-for-bit comparison of
two runs is only expected where both records match.

Versions are read from the installed packages' metadata, without importing them (transformers takes
seconds to import, and training does not need it)."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

PACKAGES = ("torch", "transformers", "numpy")
"""The packages whose versions every record carries (a command adds its own, e.g. lm_eval)."""


def installed(package: str) -> str | None:
    """A package's installed version from its metadata, or None where it is not installed."""
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def versions(*extra: str) -> dict:
    """tlm_probe's version and commit (None when run from an installed package), Python's, and the versions
    of PACKAGES and of `extra`."""
    from tlm_probe import __version__
    from tlm_probe.code_version import code_commit

    return {"tlm_probe": __version__, "tlm_probe_commit": code_commit(),
            **{p: installed(p) for p in (*PACKAGES, *extra)}, "python": platform.python_version()}


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform module says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(device: str | None = None) -> dict:
    """What decides the arithmetic: the CPU and the instruction set torch's CPU kernels use (AVX2, AVX512,
    DEFAULT, ...), torch's thread count, and the accelerator when `device` is one."""
    import torch

    out = {"arch": platform.machine(), "cpu": cpu_name(),
           "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
           "accelerator": None}
    try:
        kind = torch.device(device).type if device else "cpu"
    except (RuntimeError, TypeError):  # not a device name ("auto" before it is resolved)
        return out
    if kind == "cuda" and torch.cuda.is_available():
        index = torch.device(device).index or 0
        out["accelerator"] = {"name": torch.cuda.get_device_name(index),
                              "capability": ".".join(map(str, torch.cuda.get_device_capability(index))),
                              "cuda": torch.version.cuda}
    elif kind != "cpu":
        out["accelerator"] = {"name": kind}
    return out
