"""Attention patterns for the attention statistics (stats/attention.py), from any row with a `pattern` tap.

Our models give the pattern at a hook (blocks.{l}.attn.hook_pattern, formed beside SDPA while hooked).
transformers' attention modules return (output, ..., weights), and the weights only under eager attention:
sdpa and flash kernels never form them. So when an attention statistic is asked the probe loads a folder or
hub model with attn_implementation="eager" (`load_attention`), or switches a model it is handed to eager
for the run and back after (`eager_attention`); provenance records which. Each layer's pattern is reduced
to one value per query token inside its hook and dropped there: no pattern outlives its layer, whatever
the batch (bounded memory: one layer's (B, H, T, T) at a time, as eager attention holds anyway).
"""

from __future__ import annotations

import contextlib

import torch

from tlm_probe.capture.guardrails import GuardrailError
from tlm_probe.capture.rows import split_tap
from tlm_probe.errors import UserError

EAGER = "eager"
WHY_EAGER = "attention statistics read the attention weights, which sdpa and flash kernels do not return"
ROW_SUM_ULPS = 8.0
"""A softmax row sums to 1 within ~one rounding per term: ROW_SUM_ULPS x eps(dtype) x T_k."""


def pattern_refusal(pm, backend: str) -> str | None:
    """Why attention statistics cannot be computed on this model with this backend, None if they can."""
    tap = pm.adapter.pattern
    if tap is None:
        return f"the {pm.family} row maps no softmax attention (its blocks have none, or it is unmapped)"
    if backend != "native":
        return "attention statistics are computed by the native backend only (the default --backend native)"
    config = getattr(pm.model, "config", None)
    why = pm.adapter.pattern_refusal(config) if pm.adapter.pattern_refusal else None
    if why:
        return why
    path = split_tap(tap)[0]
    for layer in range(pm.n_layers):
        try:
            pm.layer_module(layer, path)
        except AttributeError:
            return f"layer {layer} has no attention pattern at {path!r} (its mixer is not softmax attention)"
    return None


def wants_eager(pm) -> bool:
    """transformers modules return their weights only under eager attention; our hook always gives them."""
    return pm.adapter.pattern is not None and split_tap(pm.adapter.pattern)[1] == "weights"


def implementation(model) -> str | None:
    return getattr(getattr(model, "config", None), "_attn_implementation", None)


@contextlib.contextmanager
def eager_attention(pm):
    """Inside, `pm.model` runs eager attention (switched back on exit when it was not); yields provenance:
    {"implementation": what ran, "was": what the model had, "why": ...}."""
    was = implementation(pm.model)
    if not wants_eager(pm) or was == EAGER:
        yield {"implementation": was or "hooked pattern", "why": WHY_EAGER if was == EAGER else ""}
        return
    can = getattr(pm.model, "_can_set_attn_implementation", lambda: False)()
    if can:
        pm.model.set_attn_implementation(EAGER)
    if implementation(pm.model) != EAGER:
        raise UserError(f"the attention statistics need eager attention and this {pm.family} model ({was}) "
                        "cannot switch to it once loaded: load it with attn_implementation=\"eager\"")
    try:
        yield {"implementation": EAGER, "was": was, "why": WHY_EAGER}
    finally:
        pm.model.set_attn_implementation(was)


def pattern_output(where: str, output) -> torch.Tensor | None:
    """The pattern in a module's output: "out", the output itself; "weights", the output tuple's last element
    (None under sdpa: that is what the sink reports)."""
    if where == "out":
        return output if isinstance(output, torch.Tensor) else None
    last = output[-1] if isinstance(output, tuple | list) and output else None
    return last if isinstance(last, torch.Tensor) else None


def register_pattern(pm, on_pattern, stack: contextlib.ExitStack) -> None:
    """Hook every layer's pattern tap; on_pattern(layer, pattern or None) receives it."""
    path, where = split_tap(pm.adapter.pattern)
    for layer in range(pm.n_layers):
        fn = (lambda l: lambda m, a, o: on_pattern(l, pattern_output(where, o)))(layer)
        stack.callback(pm.layer_module(layer, path).register_forward_hook(fn).remove)


def check_pattern(layer: int, pattern: torch.Tensor, index, family: str) -> None:
    """The tap gives softmax weights over this batch's keys: (B, H, T, T), every counted query's row summing
    to 1 over the keys its mask lets it see, and (up to rounding) no weight on the others."""
    B, T = index.counted.shape
    if pattern.ndim != 4 or pattern.shape[0] != B or pattern.shape[2:] != (T, T):
        raise GuardrailError(f"layer {layer}: the {family} row's pattern tap gives a tensor of shape "
                             f"{tuple(pattern.shape)}, not (batch {B}, heads, {T}, {T}): the tap is wrong")
    keys = index.keys.to(pattern.device)[:, None, None, :]
    seen = pattern.masked_fill(~keys, 0).sum(-1, dtype=torch.float64)  # (B, H, T)
    hidden = pattern.masked_fill(keys, 0).sum(-1, dtype=torch.float64)
    queries = index.counted.to(seen.device)[:, None, :].expand_as(seen)
    tol = ROW_SUM_ULPS * torch.finfo(pattern.dtype).eps * T
    bad = ((seen - 1).abs() > tol) | (hidden > tol) | ~torch.isfinite(seen)
    if bool((bad & queries).any()):
        worst = float(((seen - 1).abs() + hidden)[queries].max())
        raise GuardrailError(f"layer {layer}: the {family} row's pattern tap does not give softmax weights "
                             f"over the unmasked keys (a row is off by {worst:.3g}): its pattern is wrong")


def missing_pattern(layer: int, pm) -> str:
    """The guardrail's line when a layer's pattern hook gave nothing (an attention kernel that forms none)."""
    return (f"layer {layer}: the attention module at {pm.adapter.pattern!r} returned no weights under "
            f"attn_implementation={implementation(pm.model)!r}; attention statistics need eager attention")
