"""Each layer's MLP width d_l, read from the loaded model's parameters (never from the config), and what it
means: a dense MLP's width is the input width of its down projection; a mixture-of-experts layer's is the
width active per token (top-k routed experts x expert width + shared experts), with the parts recorded."""

from __future__ import annotations

from typing import Any

from torch import nn

DENSE = "dense"
MOE = "moe"
NONE = "none"
MEANING = {
    NONE: "no MLP in the block: 0",
    DENSE: "input width of the MLP down projection",
    MOE: "active width per token: top_k x expert width + shared expert widths (routed experts fused in one "
    "parameter; width read from its shape)",
}


def down_width(module: nn.Module) -> int:
    """Input width of a down projection: nn.Linear stores (out, in), GPT-2's Conv1D stores (in, out)."""
    if isinstance(module, nn.Linear):
        return module.in_features
    return int(module.weight.shape[0])


def _submodule(layer: nn.Module, path: str) -> nn.Module | None:
    try:
        return layer.get_submodule(path)
    except AttributeError:
        return None


def expert_width(experts: nn.Module, d_model: int) -> tuple[int, int]:
    """(number of experts, expert width) from the fused down projection (E, d_model, w) or (E, w, d_model)."""
    down = experts.down_proj
    weight = down if isinstance(down, nn.Parameter) else down.weight
    n, a, b = weight.shape
    return int(n), int(b if a == d_model else a)


def layer_mlp(adapter: Any, layer: nn.Module, config: Any, d_model: int) -> dict:
    """What this layer's MLP is: {"kind", "d_ff", ...the parts of a mixture of experts}."""
    if adapter.mlp_down is None:
        return {"kind": NONE, "d_ff": 0}
    experts = _submodule(layer, adapter.experts) if adapter.experts else None
    if experts is None:
        return {"kind": DENSE, "d_ff": down_width(layer.get_submodule(adapter.mlp_down))}
    n, width = expert_width(experts, d_model)
    top_k = int(config.num_experts_per_tok)
    shared = [
        down_width(m.down_proj) for p in adapter.shared_experts if (m := _submodule(layer, p)) is not None
    ]
    return {
        "kind": MOE,
        "d_ff": top_k * width + sum(shared),
        "experts": n,
        "expert_width": width,
        "top_k": top_k,
        "shared_widths": shared,
    }


def neuron_refusal(mlps: list[dict]) -> str | None:
    """Why neuron statistics (mlp_post, the down projection's weights) cannot be computed, or None."""
    moe = [l for l, m in enumerate(mlps) if m["kind"] == MOE]
    if not moe:
        return None
    m = mlps[moe[0]]
    return (
        f"layers {', '.join(map(str, moe))} are mixture-of-experts blocks ({m['experts']} experts of width "
        f"{m['expert_width']}, top-{m['top_k']}): each token's neurons are spread over routed experts, so "
        "there is no one down projection whose input is the layer's neuron activity"
    )
