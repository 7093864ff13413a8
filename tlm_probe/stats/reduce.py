"""Cross-rank reduction of streaming states: every state here is a sum, so merging ranks is one SUM.

Modelled on tuned-lens' `all_reduce_`: a statistic calls it on each of its sum tensors after the stream,
and it is a no-op in a single process. Float64 sums reduced this way equal one process's sums up to the
order of additions (~1e-16 relative).
"""

from __future__ import annotations

import torch


def world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def all_reduce_(x: torch.Tensor) -> torch.Tensor:
    """Sum `x` in place over all ranks (the process group's backend decides where: gloo on CPU)."""
    if world_size() > 1:
        import torch.distributed as dist

        dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x


def all_reduce_int(n: int) -> int:
    return int(all_reduce_(torch.tensor([float(n)], dtype=torch.float64)).item())
