"""torch.compile per block, as torchtitan does: each block's forward is compiled on its own, so blocks of
one shape share one compiled graph (Dynamo caches per code object; parameters are graph inputs) and a
tapered model compiles once per distinct block shape, not once per layer nor as one unrolled graph.

(The whole model in one torch.compile call, as before, unrolled every layer into one graph: compile time
grew with the number of layers, and FSDP2's hooks sat inside the traced code.) What per-block compile
needs to be sound with tapered models:
- Dynamo keeps at most `recompile_limit` (8) graphs per code object and then runs the frame *eagerly*,
  with only a warning. Parameter shapes are static (force_parameter_static_shapes), so every distinct MLP
  width is its own graph: the 440M preset under cosine:1.5:0.5 has 22 widths, and at the default limit
  15 of its 24 blocks would run eagerly (measured: 8 graphs, then the fallback). The limit is raised to
  cover every shape.
- The limit counts graphs of every model compiled in this process (graphs of a model that is gone are not
  dropped: `tlm compare` trains its arms one after another in one process), so it grows with each model.
- Only `block.forward` is compiled, in place: the module tree and the state-dict names stay as they are
  (torch.compile(module) would wrap it and prefix every name with `_orig_mod.`), so checkpoints and
  --resume do not depend on --compile, and FSDP2's per-block hooks stay outside the compiled code.
"""

from __future__ import annotations

import torch
from torch import nn

BACKEND = "inductor"
GRAPHS_PER_SHAPE = 4
"""Graphs Dynamo may make per block shape: training (grad on), evaluation (no_grad), an evaluation's last,
shorter batch (after which Dynamo makes the batch size dynamic), and one to spare (a change of autocast)."""
_granted = 0  # graphs asked for by every compile_blocks call in this process


def block_shapes(model: nn.Module) -> list[tuple]:
    """The distinct shapes of the blocks: the shapes of each block's parameters and buffers, in order."""
    seen: dict[tuple, None] = {}
    for block in model.blocks:
        tensors = [*block.parameters(), *block.buffers()]
        seen.setdefault(tuple(tuple(t.shape) for t in tensors), None)
    return list(seen)


def compile_blocks(model: nn.Module, backend: str | None = None) -> int:
    """Compile each block's forward in place; returns the number of distinct block shapes (the number of
    training graphs Dynamo will make)."""
    global _granted
    shapes = len(block_shapes(model))
    _granted += GRAPHS_PER_SHAPE * shapes
    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):  # by torch version
        if hasattr(config, name):  # only ever raised: another compiled model keeps the room it had
            setattr(config, name, max(getattr(config, name), _granted))
    for block in model.blocks:
        block.forward = torch.compile(block.forward, backend=backend or BACKEND)
    return shapes
