"""nnsight backend: one trace per batch over the model's blocks, saving only the taps the statistics need.

nnsight requires reading module inputs/outputs in the order the forward pass produces them, so the first
batch runs a two-token discovery pass with plain hooks to learn the firing order of the taps; the
trace then reads them in that order. Works on any nn.Module, ours or transformers'.
"""

from __future__ import annotations

import warnings

import torch

from tlm_probe.capture.adapters import split_tap
from tlm_probe.capture.native import first_tensor, tap_input
from tlm_probe.capture.sink import StatSink

# nnsight serves these names on every envoy; a submodule so named (BERT's `output`) becomes E_<name>
_RESERVED = ("output", "input", "inputs")


class NNsightBackend:
    name = "nnsight"

    def __init__(self, sink: StatSink):
        from nnsight import NNsight

        self.sink, self.pm = sink, sink.pm
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the renaming of BERT's `output` submodules, handled in _envoy
            self.traced = NNsight(self.pm.base)
        self.order: list[tuple[int, str]] | None = None

    def _envoy(self, layer: int, path: str):
        env = self.traced
        for part in f"{self.pm.adapter.layers}.{layer}{'.' + path if path else ''}".split("."):
            part = f"E_{part}" if part in _RESERVED else part
            env = env[int(part)] if part.isdigit() else getattr(env, part)
        return env

    def _discover(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[tuple[int, str]]:
        """The order in which the taps fire, from a tiny forward pass with plain hooks."""
        fired: list[tuple[int, str]] = []
        handles = []
        for layer in range(self.pm.n_layers):
            for piece, tap in self.sink.taps.items():
                path, where = split_tap(tap)
                module = self.pm.layer_module(layer, path)
                rec = (lambda key: lambda *a, **k: fired.append(key))((layer, piece))
                hook = module.register_forward_pre_hook if where == "in" else module.register_forward_hook
                handles.append(hook(rec))
        try:
            self.pm.forward_base(input_ids[:1, :2], attention_mask[:1, :2])
        finally:
            for h in handles:
                h.remove()
        return list(dict.fromkeys(fired))  # a module called twice would repeat its key

    def run(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, full_output: bool = False):
        import nnsight

        if self.order is None:
            self.order = self._discover(input_ids, attention_mask)
        args, kwargs = self.pm.base_inputs(input_ids, attention_mask)
        saved = {}
        with self.traced.trace(*args, **kwargs):
            for layer, piece in self.order:
                path, where = split_tap(self.sink.taps[piece])
                env = self._envoy(layer, path)
                value = tap_input(*env.inputs) if where == "in" else first_tensor(env.output)
                if piece in self.pm.adapter.copy:  # changed in place after this point (Falcon)
                    value = value.clone()
                saved[(layer, piece)] = nnsight.save(value)
        for layer in range(self.pm.n_layers):
            raw = {p: saved[(layer, p)] for p in self.sink.pieces if (layer, p) in saved}
            self.sink.on_layer(layer, raw)
        return None
