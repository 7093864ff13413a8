"""The default backend: PyTorch forward hooks that hand each layer's pieces to the sink and keep nothing.

A layer's pieces are held only until its last tap (resid_post, the layer output, always captured) fires;
then the sink updates the accumulators and the references are dropped.
"""

from __future__ import annotations

import contextlib

import torch

from tlm_probe.capture.adapters import split_tap
from tlm_probe.capture.attention import register_pattern
from tlm_probe.capture.probe_model import in_block
from tlm_probe.capture.sink import StatSink


def first_tensor(value) -> torch.Tensor | None:
    """A module's output or input may be a tensor, a tuple/list, or a ModelOutput: take the first tensor."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return next((v for v in value if isinstance(v, torch.Tensor)), None)
    return None


def tap_input(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """First positional tensor, else the first tensor keyword argument (hidden_states=...)."""
    return first_tensor(args) if args else first_tensor(kwargs)


def register_taps(pm, taps: dict[str, str], on_value, stack: contextlib.ExitStack, layers=None) -> None:
    """Hook every (layer, piece) tap; on_value(layer, piece, tensor) receives what it captures. The handles
    are removed when `stack` closes. Used by this backend and by the importance pass (same taps)."""
    for layer in range(pm.n_layers) if layers is None else layers:
        block = pm.layer(layer)  # found once a layer, not once a tap
        for piece, tap in taps.items():
            path, where = split_tap(tap)
            module = in_block(block, path)
            if where == "in":
                fn = (lambda l, p: lambda m, a, k: on_value(l, p, tap_input(a, k)))(layer, piece)
                handle = module.register_forward_pre_hook(fn, with_kwargs=True)
            else:
                fn = (lambda l, p: lambda m, a, o: on_value(l, p, first_tensor(o)))(layer, piece)
                handle = module.register_forward_hook(fn)
            stack.callback(handle.remove)


class NativeBackend:
    name = "native"

    def __init__(self, sink: StatSink):
        self.sink = sink
        self.pm = sink.pm
        self._current: dict[int, dict[str, torch.Tensor]] = {}
        self._held = False

    @contextlib.contextmanager
    def held(self):
        """Inside, the hooks stay registered from one run() to the next (the probe's stream: every batch
        would otherwise resolve and hook every tap again, ~1% of a forward on a narrow model); they are
        removed when it closes, error or not."""
        if self._held:
            yield
            return
        with contextlib.ExitStack() as stack:
            self._hooks(stack)
            self._held = True
            try:
                yield
            finally:
                self._held = False

    def _store(self, layer: int, piece: str, tensor: torch.Tensor | None) -> None:
        if tensor is None:
            return
        # a piece the model changes in place after its hook (Falcon's MLP output) is kept as a copy
        tensor = tensor.detach().clone() if piece in self.pm.adapter.copy else tensor.detach()
        self._current.setdefault(layer, {})[piece] = tensor
        if piece == "resid_post":  # the layer output fires last: the layer is complete
            self.sink.on_layer(layer, self._current.pop(layer))

    def _hooks(self, stack: contextlib.ExitStack) -> None:
        register_taps(self.pm, self.sink.taps, self._store, stack)
        if self.sink.pattern:  # reduced to per-token values in its hook; the pattern itself is not kept
            register_pattern(self.pm, self._pattern, stack)

    def _pattern(self, layer: int, pattern: torch.Tensor | None) -> None:
        self._current.setdefault(layer, {}).update(self.sink.pattern_values(layer, pattern))

    def run(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, full_output: bool = False):
        """One forward pass with hooks; returns the model output (logits when full_output)."""
        self._current = {}
        with self.held():
            fwd = self.pm.forward if full_output else self.pm.forward_base
            out = fwd(input_ids, attention_mask)
        self._current = {}
        return out
