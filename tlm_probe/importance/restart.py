"""Ablated forwards that restart from the cached clean stream at the first ablated layer.

An ablation at layer l leaves layers 0..l-1 clean, so on the ablated batch their output IS the clean one.
During each batch's clean forward we record what every layer hands on (the first tensor of its output);
an ablated forward whose lowest ablated layer is l0 then runs the model's OWN forward with layers
0..l0-1 stubbed: layer l0-1 returns the cached stream (repeated G times), the earlier ones return their
input untouched. Embeddings, masks and rotary tables are still computed by the model's own code, so
layer l0 gets exactly the arguments of a full forward; only the work of layers < l0 is skipped.

Safety (never compute on a wrong stream): restarting is used only when, in the clean forward,
- layer l+1 was called with the very tensor object layer l returned (nothing rewrites the stream between
  layers: no projection, no scaling, no extra state),
- each layer's output is a tensor, or a tuple whose other elements are all None (the stub can rebuild it),
- no layer's `forward` is already replaced on the instance (the stub would hide or remove it),
- restarting at the last layer with no ablation reproduces that layer's clean output (checked once, on
  the first batch, running that one block: catches state a layer hands to later layers outside the
  stream, e.g. a shared value residual).
  Such state, left by the clean forward of the same batch, holds the clean values the skipped layers
  would produce again; only its row count can differ from a repeated batch, which fails loudly, and a
  restarted forward that raises is run again in full (AblationEffects) and restarting is turned off.
Otherwise every ablation re-runs the whole model, as before; `reason` says why.

Memory: the cache holds the layer outputs of ONE batch, at most L x B x T x d elements of the model's
dtype on the model's device (references to the clean forward's own tensors, no copy), replaced at the
next batch; a restarted group of G ablations adds one G x B x T x d repeat of the stream it starts from.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager

import torch

from tlm_probe.importance.ablation import first_output, with_first

# the same kernels on the same inputs: differences can only come from a nondeterministic reduction order
SELF_CHECK_EPS = 64


def _stream_in(args: tuple, kwargs: dict):
    """The hidden state a layer is called with (None where there is none to recognise)."""
    return args[0] if args else kwargs.get("hidden_states")


class Restart:
    """Cache of one batch's clean layer outputs and the stubs that replay them."""

    def __init__(self, layers: list, head_share: float):
        self.layers, self.head = layers, head_share
        self.outputs: list[torch.Tensor | None] = []
        self.templates: list = []
        self.reason: str | None = None if layers else "no layers"
        self.checked = False

    def share(self, l0: int) -> float:
        """Forwards' worth of a restart at l0: the head always, the blocks l0..L-1 of L (parameter shares)."""
        L = len(self.layers)
        return self.head + (1 - self.head) * (L - l0) / L

    def usable(self) -> bool:
        outs = self.outputs
        return self.reason is None and len(outs) == len(self.layers) and all(o is not None for o in outs)

    @contextmanager
    def recording(self):
        """Record the layer outputs of the clean forward run inside, checking the stream is handed on."""
        L = len(self.layers)
        self.outputs, self.templates = [None] * L, [None] * L

        def pre(l):
            def hook(module, args, kwargs):
                if "forward" in module.__dict__:
                    self.refuse(f"layer {l}'s forward is replaced on the instance")
                if l and _stream_in(args, kwargs) is not self.outputs[l - 1]:
                    self.refuse(f"layer {l} is not called with layer {l - 1}'s output")

            return hook

        def post(l):
            def hook(module, args, kwargs, output):
                if isinstance(output, tuple) and any(o is not None for o in output[1:]):
                    self.refuse(f"layer {l} returns more than its hidden state")
                self.outputs[l], self.templates[l] = first_output(output), output  # no_grad: no graph held

            return hook

        with ExitStack() as stack:
            for l, layer in enumerate(self.layers):
                stack.callback(layer.register_forward_pre_hook(pre(l), with_kwargs=True).remove)
                stack.callback(layer.register_forward_hook(post(l), with_kwargs=True).remove)
            yield
        self.outputs = self.outputs if self.reason is None else []

    def refuse(self, why: str) -> None:
        self.reason = self.reason or why

    @contextmanager
    def from_layer(self, l0: int, times: int):
        """Inside, a forward of the batch repeated `times` times starts at layer l0 (l0 = 0: a full one)."""
        if l0 == 0 or not self.usable():
            yield
            return
        cached = self.outputs[l0 - 1]
        stream = cached.repeat(times, *([1] * (cached.dim() - 1)))
        stubs = [self._stub(l, stream if l == l0 - 1 else None) for l in range(l0)]
        try:
            for layer, stub in zip(self.layers, stubs, strict=False):
                layer.forward = stub  # an instance attribute: nn.Module.__call__ looks it up first
            yield
        finally:
            for layer in self.layers[:l0]:
                layer.__dict__.pop("forward", None)

    def _stub(self, l: int, stream: torch.Tensor | None):
        template = self.templates[l]

        def forward(*args, **kwargs):
            return with_first(template, _stream_in(args, kwargs) if stream is None else stream)

        return forward

    def block_share(self) -> float:
        """Forwards' worth of one block alone (the self-check: no head)."""
        return (1 - self.head) / max(len(self.layers), 1)

    def self_check(self, forward, batch: dict) -> None:
        """Once: restarting at the last layer without an ablation must give that layer's clean output back
        (forward(batch, share) as AblationEffects.forward). Only the last block runs: the forward stops at
        its output, before the final norm and the head, and it is compared with the recorded clean one."""
        if self.checked or not self.usable() or len(self.layers) < 2:
            return
        self.checked = True
        last, got = len(self.layers) - 1, {}

        def stop(module, args, output):
            got["out"] = first_output(output)
            raise _Stop

        handle = self.layers[last].register_forward_hook(stop)
        try:
            with self.from_layer(last, 1):
                forward(batch, self.block_share())
        except _Stop:
            pass
        except Exception as e:  # a layer that needs what a stubbed one would have set: not restartable
            self.refuse(f"restart failed: {type(e).__name__}")
            return
        finally:
            handle.remove()
        again, clean = got.get("out"), self.outputs[last]
        bound = SELF_CHECK_EPS * torch.finfo(clean.dtype).eps * float(clean.abs().max())
        if again is None or again.shape != clean.shape or float((again - clean).abs().max()) > bound:
            self.refuse("restart at the last layer does not reproduce the clean output")

    @contextmanager
    def rows(self, rows: torch.Tensor, batch_rows: int):
        """Inside, the cache holds only `rows` of the recorded batch of `batch_rows` rows (a batch the probe's
        stream forwarded whole, of which only these rows are ablated); none (full re-runs) where a layer's
        output is not (B, ...)."""
        saved = self.outputs
        whole = all(o is not None and o.shape[0] == batch_rows for o in saved)
        self.outputs = [o.index_select(0, rows) for o in saved] if whole else []
        try:
            yield
        finally:
            self.outputs = saved


class _Stop(Exception):
    """Raised by the self-check's hook at the last layer's output: nothing after it needs to run."""
