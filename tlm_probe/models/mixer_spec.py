"""What one row of the mixer registry holds (MixerSpec), and the torch-free parts its formulas compose.

A row names a token mixer's settings class, its module (an import path: the registry imports no torch), and
its formulas: the tensors it adds to a block (state-dict name -> shape), its parameters, what of those is
not multiplied with every token, the context its attention sees and the FLOPs of its in-context updates.
models/shapes.py and models/accounting.py read the rows and compose the block and the model around them;
models/mixers.py imports the modules. The formulas take the model's TLMConfig (duck-typed here, so this
module sits below models/config.py, which builds TLMConfig from the rows' settings classes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tlm_probe.errors import UserError
from tlm_probe.registry import Registry

Shapes = dict[str, tuple[int, ...]]
NORM_PARAMS = {"rmsnorm": 1, "layernorm": 2}
"""Parameters of a norm per unit of width: a scale (RMSNorm) or a scale and a bias (LayerNorm)."""
MLP_INPUTS = {"swiglu": ("W_gate", "W_in"), "gelu": ("W_in",)}
"""cfg.mlp -> the MLP's (d_l, d) input matrices; every MLP also has W_out (d, d_l)."""


class ConfigError(UserError, ValueError):
    """An invalid model configuration; the message names the bad field."""


MLPS: Registry[type] = Registry("mlp", {"swiglu": "tlm_probe.models.mlp:SwiGLU",
                                        "gelu": "tlm_probe.models.mlp:GeluMLP"}, lazy=True, error=ConfigError)
"""cfg.mlp -> its nn.Module class (models/mlp.py, imported on first use), built as Class(d_model, d_l)."""


def norm_shapes(cfg: Any, prefix: str) -> Shapes:
    d = (cfg.d_model,)
    return {f"{prefix}.weight": d, **({f"{prefix}.bias": d} if cfg.norm == "layernorm" else {})}


def attention_shapes(cfg: Any, prefix: str, layer: int, gated: bool = False) -> Shapes:
    """Softmax attention of layer `layer`'s heads (models/attention.py), with the G1 gate if `gated`."""
    d, q, kv = cfg.d_model, cfg.heads_at(layer) * cfg.d_head, cfg.kv_heads_at(layer) * cfg.d_head
    out = {f"{prefix}.W_Q.weight": (q, d), f"{prefix}.W_K.weight": (kv, d), f"{prefix}.W_V.weight": (kv, d),
           f"{prefix}.W_O.weight": (d, q)}
    return {**out, f"{prefix}.W_G.weight": (q, d)} if gated else out


def attention_params(cfg: Any, layer: int) -> int:
    """d·(H_l + 2·H_kv,l)·d_h + H_l·d_h·d: the sizes of attention_shapes, ungated."""
    d, dh, H, KV = cfg.d_model, cfg.d_head, cfg.heads_at(layer), cfg.kv_heads_at(layer)
    return d * (H + 2 * KV) * dh + H * dh * d


def mlp_shapes(cfg: Any, prefix: str, width: int) -> Shapes:
    out = {f"{prefix}.{m}.weight": (width, cfg.d_model) for m in MLP_INPUTS[cfg.mlp]}
    return {**out, f"{prefix}.W_out.weight": (cfg.d_model, width)}


def mlp_matrices(cfg: Any) -> int:
    """Matrices of one MLP (3 for SwiGLU, 2 for GELU), each d·d_l."""
    return len(MLP_INPUTS[cfg.mlp]) + 1


def _plain_mlp(cfg: Any, prefix: str, layer: int) -> Shapes:
    return mlp_shapes(cfg, prefix, cfg.d_ff[layer])


def _one(cfg: Any) -> int:
    return 1


def _none(cfg: Any, *args) -> int:
    return 0


def _whole(cfg: Any, seq_len: int) -> int:
    return seq_len


class TrainingHooks:
    """What the trainer (train/loop.py) calls on a mixer's behalf; this default does nothing. A row names its
    own subclass (`training`), built as Class(model, fsdp) on the unwrapped model before training starts."""

    def __init__(self, model: Any, fsdp: bool):
        self.model = model

    def before_step(self, step: int) -> None:
        """After gradient clipping, before opt.step() of training step `step` (1-based)."""

    def log(self) -> dict[str, float]:
        """Extra fields of the training record at a log step."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Training state beyond the optimizer's, merged into the checkpoint's `extra`."""
        return {}

    def load_state_dict(self, extra: dict[str, Any]) -> None:
        """Restore from a checkpoint's `extra` (on resume)."""


@dataclass(frozen=True)
class Component:
    """A per-layer count of a mixer's own that a schedule can taper (`--component NAME`) at the same total."""

    field: str
    """Its settings field holding the per-layer values (empty: uniform's value in every layer)."""
    uniform: Callable[[Any], int]
    """cfg -> uniform's value in every layer (the schedule keeps the mean exactly)."""
    unit: int = 1
    """The values are multiples of this (of 1 where uniform's value is not one)."""
    counts: str = ""
    """What the values count (tables and messages)."""

    def at(self, cfg: Any, layer: int) -> int:
        values = getattr(cfg, self.field)
        return values[layer] if values else self.uniform(cfg)


@dataclass(frozen=True, kw_only=True)
class MixerSpec:
    """One token mixer: everything tlm knows about it apart from its torch module's code."""

    name: str
    """Its cfg.mixer value (config.json's "mixer")."""
    help: str
    """Its description in the --mixer help ("": the name says it)."""
    module: str
    """Its token mixer's nn.Module class as "package.module:Class", built as Class(cfg, layer)."""
    shapes: Callable[[Any, str, int], Shapes]
    """(cfg, prefix, layer) -> the tensors of layer `layer`'s token mixer under `prefix`."""
    params: Callable[[Any, int], int]
    """(cfg, layer) -> the parameters of layer `layer`'s token mixer (the sizes of `shapes`)."""
    settings: type | None = None
    """Its own settings dataclass (TLMConfig inherits its fields; None: it has only TLMConfig's own)."""
    kv_cache: bool = False
    """Its state over past tokens is their keys and values, so generation may cache them."""
    output_gate: bool = False
    """Its softmax attention has the G1 per-head output gate (models/attention.py)."""
    static_params: Callable[[Any, int], int] = _none
    """(cfg, layer) -> those of its parameters not multiplied with every token's activations (biases,
    initial memory weights, persistent tokens, norms): left out of N_matmul."""
    attention_context: Callable[[Any, int], int] = _whole
    """(cfg, seq_len) -> the keys each query attends over (T_att in the FLOP count)."""
    inner_flops: Callable[[Any], int] = _none
    """cfg -> training FLOPs per token of its in-context updates, summed over layers."""
    mlp_module: str = ""
    """The module that replaces the block's MLP, as "package.module:Class" built as Class(cfg, layer)
    ("": the cfg.mlp MLP of width d_ff[l], models/mlp.py)."""
    mlp_shapes: Callable[[Any, str, int], Shapes] = _plain_mlp
    """(cfg, prefix, layer) -> the tensors of layer `layer`'s MLP under `prefix`."""
    mlp_levels: Callable[[Any], int] = _one
    """cfg or its settings -> MLPs per block, each of width d_ff[l] with its own norm after the first."""
    splits_mlp: str = ""
    """What the block's MLP budget d_ff is split evenly over ("": one MLP gets it all)."""
    adaptive_levels: Callable[[Any], int] = _none
    """cfg -> MLP levels per block that update in context, each with one step-size parameter."""
    paper_scale: dict[str, Any] = field(default_factory=dict)
    """Its settings in the paper-scale presets (models/presets.py), where they differ from the defaults."""
    components: dict[str, Component] = field(default_factory=dict)
    """Its own per-layer counts a schedule can taper: component name -> Component."""
    retired: dict[str, str] = field(default_factory=dict)
    """config.json keys of an older version of this mixer whose weights no longer fit: key -> why."""
    training: str = "tlm_probe.models.mixer_spec:TrainingHooks"
    """Its TrainingHooks class as "package.module:Class": what the trainer calls on its behalf."""
