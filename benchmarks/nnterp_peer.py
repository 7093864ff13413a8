"""nnterp (PyPI `nnterp`, pinned 1.3.0, a dev dependency) as a peer of tlm_probe's capture: its
StandardizedTransformer on an already-loaded Hugging Face model, and every layer's MLP output
(`mlps_output[l]`) and block output (`layers_output[l]`) read in one trace.

nnterp 1.3.0 was written for nnsight 0.6/0.7; the locked nnsight 0.8.1 moved two things it reads:
- `nnsight.intervention.tracing.globals.Object` (a type alias for values read in a trace) is now
  `nnsight.Object`: the old module path is registered as an alias before nnterp is imported;
- the wrapped module, `self._model` in nnterp's constructor, is now `_module`: a subclass spells it.
Nothing else is changed: the renaming, its checks (a scan of every renamed piece at construction) and the
accessors are nnterp's own.
"""

from __future__ import annotations

import sys
import types
from functools import cache

import torch

OLD_OBJECT_MODULES = ("nnsight.intervention.tracing", "nnsight.intervention.tracing.globals")
NO_MLP = frozenset({"OPTForCausalLM"})
"""nnterp renames no MLP module in these (its get_ignores: OPT's fc1/fc2 sit in the layer itself)."""


@cache
def standardized_class() -> type:
    """nnterp.StandardizedTransformer, importable and constructible under nnsight 0.8."""
    import nnsight

    for name in OLD_OBJECT_MODULES:
        alias = types.ModuleType(name)
        alias.Object = nnsight.Object
        sys.modules.setdefault(name, alias)
    from nnterp import StandardizedTransformer

    class Standardized(StandardizedTransformer):
        _model = property(lambda self: self._module)

    return Standardized


def standardized(model: torch.nn.Module, tokenizer, **kw):
    """nnterp's StandardizedTransformer around `model` (not copied, not moved: `device_map` is not applied to
    an already-loaded module); raises what nnterp raises for a model it does not cover."""
    return standardized_class()(model, tokenizer=tokenizer, **kw)


def has_mlp(st) -> bool:
    return type(st._module).__name__ not in NO_MLP


def capture(st, ids: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """{"mlps_output": (L, B, T, d), "layers_output": (L, B, T, d)} from one trace (the MLP outputs where
    nnterp has an MLP module), read in execution order: nnsight refuses a value the forward has passed."""
    mlps, layers = [], []
    with torch.no_grad(), st.trace({"input_ids": ids, "attention_mask": mask}, use_cache=False):
        for l in range(st.num_layers):
            if has_mlp(st):
                mlps.append(st.mlps_output[l].save())
            layers.append(st.layers_output[l].save())
    out = {"layers_output": torch.stack(list(layers))}
    if mlps:
        out["mlps_output"] = torch.stack(list(mlps))
    return out


def mlp_outputs(st, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(L, B, T, d): every layer's `mlps_output[l]`, nothing else saved (the benchmark's arm)."""
    saved = []
    with st.trace({"input_ids": ids, "attention_mask": mask}, use_cache=False):
        for l in range(st.num_layers):
            saved.append(st.mlps_output[l].save())
    return torch.stack(list(saved))
