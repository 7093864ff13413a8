"""What the importance suite hooks on a ProbeModel, read from the adapter row (never from the family name).

- residual stream r = 0..L: the input of block 0, then the output of every block;
- neuron activity of layer l: the input of the MLP down projection (width d_l), for every family;
- ablation targets: the modules of the `mlp_out` and `attn_out` taps (by contract the sublayer outputs
  before the residual add, e.g. BERT's output.dense, not the LayerNorm after it) and the block itself.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from tlm_probe.capture.adapters import split_tap
from tlm_probe.importance.ablation import Ablation, block_input, first_tensor


def tap_module(pm, layer: int, piece: str) -> nn.Module:
    path, where = split_tap(pm.taps()[piece])
    if where != "out":
        raise ValueError(f"{pm.family}: tap for {piece} is not a module output ({pm.taps()[piece]})")
    return pm.layer_module(layer, path)


def ablation_plan(pm, kinds: tuple[str, ...]) -> list[Ablation]:
    """The interventions for every layer; `kinds` names are `<part>_<kind>` (e.g. mlp_zero, block_skip)."""
    where = {
        "mlp": lambda l: tap_module(pm, l, "mlp_out"),
        "attn": lambda l: tap_module(pm, l, "attn_out"),
        "block": pm.layer,
    }
    plan = []
    for l in range(pm.n_layers):
        for name in kinds:
            part, kind = name.split("_")
            plan.append(Ablation(name, l, where[part](l), kind))
    return plan


@contextmanager
def capturing(pm):
    """Yield a dict filled by each forward: "resid" (L+1 of (B, T, d)) and "post" (L of (B, T, d_l))."""
    L = pm.n_layers
    store: dict = {"resid": [None] * (L + 1), "post": [None] * L}

    def block_hook(l):
        def hook(module, args, kwargs, output):
            if l == 0:
                store["resid"][0] = block_input(args, kwargs).detach()
            store["resid"][l + 1] = first_tensor(output).detach()

        return hook

    def down_hook(l):
        def hook(module, args):
            store["post"][l] = args[0].detach()

        return hook

    handles = []
    try:
        for l in range(L):
            handles.append(pm.layer(l).register_forward_hook(block_hook(l), with_kwargs=True))
            handles.append(pm.mlp_down(l).register_forward_pre_hook(down_hook(l)))
        yield store
    finally:
        for h in handles:
            h.remove()


def output_tensor(out) -> torch.Tensor:
    """Logits of a causal LM or the last hidden state of an encoder, whatever the return type."""
    if torch.is_tensor(out):
        return out
    for name in ("logits", "last_hidden_state"):
        if getattr(out, name, None) is not None:
            return getattr(out, name)
    return out[0]
