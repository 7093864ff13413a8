"""Each layer's MLP width d_l, read from the loaded model's parameters (never from the config), and what it
means: a dense MLP's width is the input width of its down projection; a mixture-of-experts layer's is the
width active per token (top-k routed experts x expert width + shared experts), with the parts recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from tlm_probe.errors import UserError

DENSE = "dense"
_MOE = "moe"
NONE = "none"
MEANING = {
    NONE: "no MLP in the block: 0",
    DENSE: "input width of the MLP down projection",
    _MOE: "active width per token: top_k x expert width + shared expert widths (routed experts fused in one "
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
        "kind": _MOE,
        "d_ff": top_k * width + sum(shared),
        "experts": n,
        "expert_width": width,
        "top_k": top_k,
        "shared_widths": shared,
    }


def neuron_refusal(mlps: list[dict]) -> str | None:
    """Why neuron statistics (mlp_post, the down projection's weights) cannot be computed, or None."""
    moe = [l for l, m in enumerate(mlps) if m["kind"] == _MOE]
    if not moe:
        return None
    m = mlps[moe[0]]
    return (
        f"layers {', '.join(map(str, moe))} are mixture-of-experts blocks ({m['experts']} experts of width "
        f"{m['expert_width']}, top-{m['top_k']}): each token's neurons are spread over routed experts, so "
        "there is no one down projection whose input is the layer's neuron activity"
    )


# --- widths a file declares per layer (heterogeneous models), to report and to check the weights against


def make_divisible(v: float, divisor: int) -> int:
    """OpenELM's rounding (from MobileNet): to the nearest multiple of divisor, at least divisor, and never
    more than 10% below v."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _per_layer(value, n: int, what: str) -> list:
    """A scalar broadcast to n layers, or a list of exactly n."""
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(values) != n:
        raise UserError(f"{what} has {len(values)} entries for {n} layers")
    return values


def _linspace_rounded(a: float, b: float, n: int) -> list[float]:
    """OpenELM's (start, end) multipliers: numpy's n evenly spaced values, rounded to 2 decimals."""
    import numpy as np

    return [round(float(v), 2) for v in np.linspace(a, b, num=n, dtype=float)]


def openelm_widths(config: dict) -> dict[str, list[int]]:
    """Per-layer MLP widths and query / key-value heads of an OpenELM-style config (config.json as saved:
    ffn_multipliers per layer, or a (start, end) pair or one number; num_query_heads per layer, or computed
    from qkv_multipliers the same way). d_ff = make_divisible(multiplier x model_dim, ffn_dim_divisor)."""
    n, dim = int(config["num_transformer_layers"]), int(config["model_dim"])
    ffn = config["ffn_multipliers"]
    mults = _linspace_rounded(*ffn, n) if isinstance(ffn, (list, tuple)) and len(ffn) == 2 else ffn
    divisor = int(config.get("ffn_dim_divisor", 256))
    d_ff = [make_divisible(m * dim, divisor) for m in _per_layer(mults, n, "ffn_multipliers")]
    heads = config.get("num_query_heads")
    if not isinstance(heads, (list, tuple)):
        heads = _openelm_heads(config, n, dim)
    heads = [int(h) for h in _per_layer(heads, n, "num_query_heads")]
    groups = int(config.get("num_gqa_groups") or 1)
    kv = config.get("num_kv_heads") or [h // groups for h in heads]
    return {"d_ff": d_ff, "heads": heads, "kv_heads": [int(k) for k in _per_layer(kv, n, "num_kv_heads")]}


def _openelm_heads(config: dict, n: int, dim: int) -> list[int]:
    head_dim, groups = int(config["head_dim"]), int(config.get("num_gqa_groups") or 2)
    qkv = config.get("qkv_multipliers", 1.0)
    mults = _linspace_rounded(*qkv, n) if isinstance(qkv, (list, tuple)) else [qkv] * n
    return [make_divisible(dim * m, head_dim * groups) // head_dim for m in mults]


GGUF_WIDTH_KEYS = {"d_ff": "feed_forward_length", "heads": "attention.head_count"}
GGUF_WIDTH_KEYS["kv_heads"] = "attention.head_count_kv"


def _gguf_field(reader, key: str):
    field = reader.get_field(key)
    return None if field is None else field.contents()


def gguf_widths(path: Path) -> dict[str, list[int]]:
    """Per-layer widths a GGUF file declares ({arch}.feed_forward_length and head counts: one number, or
    an array per layer in heterogeneous models), checked against the shapes of its ffn_down tensors; a
    UserError where they disagree (the weights are what runs)."""
    from gguf import GGUFReader

    from tlm_probe.capture.gguf_header import check_gguf

    check_gguf(path)  # every declared length within the file, before the reader allocates it
    reader = GGUFReader(str(path))
    arch = _gguf_field(reader, "general.architecture")
    n = _gguf_field(reader, f"{arch}.block_count")
    if arch is None or n is None:
        raise UserError(f"{path}: no general.architecture / block_count metadata")
    out = {}
    for name, key in GGUF_WIDTH_KEYS.items():
        value = _gguf_field(reader, f"{arch}.{key}")
        if value is not None:
            out[name] = [int(v) for v in _per_layer(value, int(n), f"{path}: {arch}.{key}")]
    downs = {t.name: t for t in reader.tensors if t.name.endswith(".ffn_down.weight")}
    for l, width in enumerate(out.get("d_ff", [])):
        tensor = downs.get(f"blk.{l}.ffn_down.weight")
        shape = None if tensor is None else int(tensor.shape[0])  # ggml order: ne[0] is the input width
        if shape is not None and shape != width:
            raise UserError(
                f"{path}: layer {l} declares feed_forward_length {width} but its ffn_down tensor takes "
                f"{shape} inputs"
            )
    return out


def declared_widths(config: Any) -> list[int] | None:
    """Per-layer MLP widths a config declares, where it declares them per layer: OpenELM-style
    (ffn_multipliers) or a per-layer intermediate_size list; None for one uniform width."""
    raw = config.to_dict() if hasattr(config, "to_dict") else dict(getattr(config, "__dict__", {}))
    if "ffn_multipliers" in raw and "model_dim" in raw:
        return openelm_widths(raw)["d_ff"]
    size = raw.get("intermediate_size")
    return [int(v) for v in size] if isinstance(size, (list, tuple)) else None


def check_declared(mlps: list[dict], declared: list[int] | None, source: str) -> None:
    """The widths read from the weights (what runs) must be the ones the file declares, layer by layer,
    for dense layers; a mismatch means the d_ff column would be wrong for one of them."""
    if declared is None:
        return
    if len(declared) != len(mlps):
        raise UserError(f"{source} declares MLP widths for {len(declared)} layers, the model has {len(mlps)}")
    for l, (m, width) in enumerate(zip(mlps, declared, strict=True)):
        if m["kind"] == DENSE and m["d_ff"] != width:
            raise UserError(
                f"{source} declares an MLP width of {width} at layer {l}, but its down projection takes "
                f"{m['d_ff']} inputs"
            )
