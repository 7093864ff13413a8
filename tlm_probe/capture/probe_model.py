"""ProbeModel: a loaded model plus the adapter row that says where its pieces are.

Callers ask for "the MLP of layer 3" instead of knowing that GPT-2 calls it `transformer.h.3.mlp`. Kept in
a module of its own, below the loaders (capture/loading.py) and the discovery that the loaders use, so that
the sinks, backends and scorers that take a ProbeModel import no loader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tlm_probe.capture.adapters import Adapter, adapter_source
from tlm_probe.capture.seq2seq import decoder_call
from tlm_probe.capture.widths import MEANING


@dataclass
class ProbeModel:
    """A loaded model plus the adapter row that says where its pieces are."""

    model: nn.Module
    adapter: Adapter
    tokenizer: Any | None
    name: str
    family: str
    model_type: str
    block_kind: str
    n_layers: int
    d_ff: tuple[int, ...]
    is_causal: bool
    vocab_size: int
    d_model: int = 0
    path: Path | None = None
    scales: dict[str, float] = field(default_factory=dict)
    """piece -> factor applied to the captured module output (Adapter.scale)."""
    mlp_layers: tuple[dict[str, Any], ...] = ()
    """Per layer: what the MLP is and what d_ff means there (widths.layer_mlp)."""
    lens_refusal: str | None = None
    """Why final norm + head of a layer is not the model's readout (Adapter.head_transform); None if it is."""
    neuron_refusal: str | None = None
    """Why statistics of MLP neurons (mlp_post, the down projection) cannot be computed; None if they can."""

    @property
    def base(self) -> nn.Module:
        """The module holding the blocks (the transformer without its LM head)."""
        return getattr(self.model, "base_model", self.model)

    def layer(self, l: int) -> nn.Module:
        return self.base.get_submodule(f"{self.adapter.layers}.{l}")

    def layer_module(self, l: int, rel: str | None) -> nn.Module | None:
        """The module at `rel` inside layer l ("" is the layer itself)."""
        if rel is None:
            return None
        return in_block(self.layer(l), rel)

    def mlp(self, l: int) -> nn.Module:
        return self.layer_module(l, self.adapter.mlp)

    def mlp_down(self, l: int) -> nn.Module:
        """Down projection (nn.Linear or Conv1D); its input is the neuron activity (width d_l)."""
        return self.layer_module(l, self.adapter.mlp_down)

    def final_norm(self) -> nn.Module | None:
        """The map between the last block and the head (a norm; OPT-350m's project_out), None if absent."""
        path = self.adapter.final_path(self.block_kind)
        return optional_module(self.base, path) if path else None

    def lm_head(self) -> nn.Module | None:
        return self.model.get_submodule(self.adapter.lm_head) if self.adapter.lm_head else None

    def describe(self) -> dict[str, Any]:
        """The adapter as provenance: where the row came from, its taps and what d_ff means per layer."""
        kinds = {m["kind"] for m in self.mlp_layers}
        return {
            "source": adapter_source(self.adapter),
            "family": self.family,
            "taps": self.taps(),
            "scales": self.scales,
            "copied": sorted(self.adapter.copy),
            "settings": dict(self.adapter.setup),
            "notes": self.adapter.notes,
            "d_ff_meaning": {k: MEANING[k] for k in sorted(kinds)},
            "mlp_layers": list(self.mlp_layers),
            "neuron_statistics": self.neuron_refusal or "available",
            "logit_lens": self.lens_refusal or "available",
        }

    def taps(self) -> dict[str, str]:
        """piece -> tap for this model's block kind."""
        return dict(self.adapter.taps[self.block_kind])

    def base_inputs(self, input_ids: torch.Tensor,
                    attention_mask: torch.Tensor) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """(args, kwargs) for calling `self.base` on a batch."""
        config = getattr(self.model, "config", None)
        return CALLS[self.adapter.inputs](input_ids, attention_mask, config)

    def forward_base(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        """Run the blocks (no LM head: the probe statistics never need logits)."""
        args, kwargs = self.base_inputs(input_ids, attention_mask)
        return self.base(*args, **kwargs)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        """The full model (logits for decoders, hidden states for encoders)."""
        args, kwargs = self.base_inputs(input_ids, attention_mask)
        if not self.is_causal:  # encoders take no use_cache
            kwargs.pop("use_cache", None)
        return self.model(*args, **kwargs)


# Adapter.inputs -> (input_ids, attention_mask, config) -> (args, kwargs) of a forward call
CALLS = {
    "positional": lambda ids, mask, cfg: ((ids,), {"attention_mask": mask}),
    "keywords": lambda ids, mask, cfg: ((), {"input_ids": ids, "attention_mask": mask, "use_cache": False}),
    "seq2seq_decoder": decoder_call,
}


def in_block(block: nn.Module, rel: str) -> nn.Module:
    """The module at `rel` inside a layer's module `block` ("" is the block itself)."""
    return block.get_submodule(rel) if rel else block


def optional_module(root: nn.Module, path: str) -> nn.Module | None:
    """The submodule at path, or None where the model has none (OPT keeps None in absent slots)."""
    try:
        return root.get_submodule(path)
    except AttributeError:
        return None
