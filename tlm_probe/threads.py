"""PyTorch's CPU threads: how many for one run (`tlm probe/eval --threads N`, `probe(threads=N)`; 0 leaves
them), and how the idle ones wait (the `tlm` command: passive_omp_wait)."""

from __future__ import annotations

import contextlib
import os
import sys

from tlm_probe.errors import UserError


@contextlib.contextmanager
def torch_threads(n: int, name: str = "--threads"):
    """Set torch's intra-op threads for the block only, and restore them after (0: leave them as they are;
    a busy machine runs fastest with 1, since oversubscribed threads wait on each other)."""
    import torch

    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise UserError(f"{name} must be an integer >= 0, got {n!r}")
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


OMP_WAIT = "OMP_WAIT_POLICY"
KEEP_DEFAULT = "TLM_PROBE_OMP_WAIT"
"""Set to `default` (before the command starts) to leave OpenMP's own wait policy, as the benchmark does."""


def passive_omp_wait() -> bool:
    """OMP_WAIT_POLICY=PASSIVE for this process and its children, unless the user set the variable (or
    TLM_PROBE_OMP_WAIT=default) or torch is already imported (libgomp reads it once, when it is loaded).

    By default an idle OpenMP thread spins for a while before it sleeps, so that the next parallel region
    starts without a wake-up. Where other jobs take the cores, the spinning threads take turns with the
    thread that has work, and a region waits for all of them. Measured on this 2-core machine beside two
    single-thread training runs (benchmarks/bench_omp_wait.py, medians of 7 interleaved rounds):
    `tlm demo --quick` 11.6 s instead of 64.9 s; with the cores idle, 4.5% slower (10.5 s against 10.2 s).
    The `tlm` command calls this first thing; a Python caller sets the variable before importing torch."""
    kept = os.environ.get(KEEP_DEFAULT, "").lower() == "default"
    if OMP_WAIT in os.environ or kept or "torch" in sys.modules:
        return False
    os.environ[OMP_WAIT] = "PASSIVE"
    return True
