"""PyTorch's CPU threads for one run: `tlm probe/eval --threads N` and `probe(threads=N)` (0: leave them)."""

from __future__ import annotations

import contextlib

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
