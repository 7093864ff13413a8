"""What the importance suite hooks on a ProbeModel, read from the adapter row (never from the family name).

- residual stream r = 0..L: the resid_pre tap of block 0, then the resid_post tap of every block;
- neuron activity of layer l: the mlp_post tap (input of the MLP down projection, width d_l);
- ablation targets: the modules of the `mlp_out` and `attn_out` taps (by contract the sublayer outputs
  before the residual add, e.g. BERT's output.dense, not the LayerNorm after it) and the block itself.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager

import torch
from torch import nn

from tlm_probe.capture.adapters import split_tap
from tlm_probe.capture.native import register_taps
from tlm_probe.importance.ablation import Ablation


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
def capturing(pm, resid: bool = True, post: bool = True):
    """Yield a dict filled by each forward: "resid" (L+1 of (B, T, d)) and "post" (L of (B, T, d_l)), through
    the probe's own tap hooks (capture.native.register_taps) on the adapter's resid_pre (layer 0),
    resid_post and mlp_post taps."""
    L = pm.n_layers
    store: dict = {"resid": [None] * (L + 1), "post": [None] * L}
    slots = {
        "resid_pre": lambda l: ("resid", 0),
        "resid_post": lambda l: ("resid", l + 1),
        "mlp_post": lambda l: ("post", l),
    }

    def on_value(layer: int, piece: str, value: torch.Tensor) -> None:
        key, i = slots[piece](layer)
        store[key][i] = value.detach()

    taps = pm.taps()
    with ExitStack() as stack:
        if resid:
            register_taps(pm, {"resid_pre": taps["resid_pre"]}, on_value, stack, layers=[0])
            register_taps(pm, {"resid_post": taps["resid_post"]}, on_value, stack)
        if post:
            register_taps(pm, {"mlp_post": taps["mlp_post"]}, on_value, stack)
        yield store


def output_tensor(out) -> torch.Tensor:
    """Logits of a causal LM or the last hidden state of an encoder, whatever the return type."""
    if torch.is_tensor(out):
        return out
    for name in ("logits", "last_hidden_state"):
        if getattr(out, name, None) is not None:
            return getattr(out, name)
    return out[0]
