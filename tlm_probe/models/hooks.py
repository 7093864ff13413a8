"""Activations formed only for their hook points (TransformerLens names), beside a fused computation.

SDPA never forms the attention scores or pattern, and a norm need not form its scale as TransformerLens
writes it: these are computed only while a hook is attached. A hook that only reads them (run_with_cache)
leaves the fused result in place, so caching everything changes no number; a hook that edits one (in place
or by returning a new tensor), or reads its gradient (a backward hook), makes the forward go through it.
"""

from __future__ import annotations

import torch
from transformer_lens.hook_points import HookPoint


def has_hooks(hook: HookPoint) -> bool:
    """Whether a forward or backward hook is attached (names_filter leaves out the rest)."""
    return bool(hook._forward_hooks or hook._backward_hooks)


def edit(hook: HookPoint, value: torch.Tensor) -> torch.Tensor | None:
    """The hooked value when the forward must use it; None when the hooks (if any) only read `value`."""
    if not has_hooks(hook):
        return None
    if hook._backward_hooks:  # its gradient flows only through a tensor the forward uses
        return hook(value)
    before = value.clone()
    out = hook(value)
    return None if torch.equal(out, before) else out
