"""Where every backend delivers each layer's captured pieces: guardrails, then every accumulator.

Every batch: every tap must have fired and every captured piece must be finite (read off the squared norms
the statistics compute anyway, all layers at once when the batch ends). The first `check_batches` batches
also verify additivity (the pieces add up): an adapter is structural, so a wrong one shows in the first
batch, and later batches skip the cost.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from tlm_probe.capture.attention import check_pattern, missing_pattern
from tlm_probe.capture.guardrails import (
    AdditivityChecks,
    GuardrailError,
    NonFiniteError,
    add_derived,
    capture_set,
    check_finite,
    picker,
    sample_counted,
)
from tlm_probe.capture.probe_model import ProbeModel
from tlm_probe.stats.accumulator import Accumulator
from tlm_probe.stats.attention import ENTROPY, token_entropy
from tlm_probe.stats.pieces import LayerPieces, TokenIndex
from tlm_probe.stats.workspace import Workspace


class StatSink:
    """Feeds accumulators layer by layer; knows which pieces to capture for a model's block kind."""

    def __init__(
        self, pm: ProbeModel, accumulators: list[Accumulator], guardrails: bool = True, check_batches: int = 1
    ):
        self.pm, self.accumulators, self.guardrails = pm, accumulators, guardrails
        self.check_batches, self.batches_done = check_batches, 0
        needs = set().union(*(a.needs for a in accumulators)) if accumulators else set()
        taps = pm.taps()
        missing = capture_set(pm.block_kind, needs) - set(taps)
        if missing:
            raise GuardrailError(f"the {pm.family} adapter has no tap for {', '.join(sorted(missing))}")
        self.pieces = sorted(capture_set(pm.block_kind, needs))
        self.needs = needs  # guardrail-only pieces (post-LN sums) stay out of the statistics' products
        self.taps = {p: taps[p] for p in self.pieces}
        self.scales = dict(pm.scales)  # piece -> factor on the module output; a backend may clear it
        self.index: TokenIndex | None = None
        self.layers_seen: list[int] = []
        self.scratch = Workspace()
        self.checks = AdditivityChecks(pm.block_kind, self.taps)  # the first batches' sums, layers at once
        self.scalars = frozenset().union(*(getattr(a, "scalars", frozenset()) for a in accumulators))
        self.pattern = pm.adapter.pattern if self.scalars else None  # the tap a backend hooks for them

    def start_batch(self, index: TokenIndex) -> None:
        self.index, self.layers_seen = index, []
        self._sample = None  # picker of the tokens the first batches' additivity check reads
        self.squares: list[tuple[int, str, torch.Tensor]] = []  # (layer, piece, (B, T)) for check_finite
        self.checks.clear()

    def on_layer(self, layer: int, raw: dict[str, torch.Tensor]) -> None:
        with _one_thread(self.index.counted.device):
            self._on_layer(layer, raw)

    def _on_layer(self, layer: int, raw: dict[str, torch.Tensor]) -> None:
        scalars = {k: raw.pop(k) for k in self.scalars if k in raw}  # (B, T) per-token values, no pieces
        if len(scalars) < len(self.scalars):
            raise GuardrailError(missing_pattern(layer, self.pm))
        missing = [p for p in self.pieces if p not in raw]
        if missing:
            where = ", ".join(f"{p} ({self.taps[p]})" for p in missing)
            raise GuardrailError(
                f"layer {layer}: hook(s) never fired: {where}; the {self.pm.family} adapter "
                "does not match this model"
            )
        B, T = self.index.counted.shape
        scales = self.scales  # Granite: the block adds residual_multiplier x the module output
        raw = {k: as_btd(v, B, T) * scales[k] if k in scales else as_btd(v, B, T) for k, v in raw.items()}
        full_check = self.guardrails and (self.check_batches < 0 or self.batches_done < self.check_batches)
        if full_check:  # on a sample of tokens; every token's finiteness is checked when the batch ends
            try:
                if self._sample is None:  # once per batch: every layer checks the same tokens
                    self._sample = _sample_picker(self.index)
                self.checks.add(layer, raw, self._sample)
            except NonFiniteError:
                check_finite(self.squares, self.index)  # an earlier layer at fault is named first
                raise
        add_derived(self.pm.block_kind, raw)
        pieces = LayerPieces(
            layer, {k: v for k, v in raw.items() if k in self.needs} or raw, self.index, self.scratch, scalars
        )
        self.squares += [(layer, name, pieces.square(name)) for name in pieces.raw]
        self.squares += [(layer, name, v.to(self.squares[0][2].dtype)) for name, v in scalars.items()]
        for acc in self.accumulators:
            acc.update(layer, pieces)
        self.layers_seen.append(layer)

    def pattern_values(self, layer: int, pattern: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """A layer's attention weights -> its per-token scalars ({} when the module gave none: on_layer
        then names the cause); checked against the batch's mask in the first batches."""
        if pattern is None:
            return {}
        with _one_thread(self.index.counted.device):
            pattern = pattern.detach()
            if self.guardrails and (self.check_batches < 0 or self.batches_done < self.check_batches):
                check_pattern(layer, pattern, self.index, self.pm.family)
            keys = self.index.keys.to(pattern.device)  # a dispatched layer may sit on another device
            return {ENTROPY: token_entropy(pattern, keys).to(self.index.counted.device)}

    def end_batch(self) -> None:
        if self.layers_seen != list(range(self.pm.n_layers)):
            raise GuardrailError(
                f"layers completed in this batch: {self.layers_seen}, expected 0..{self.pm.n_layers - 1}"
                f"; the {self.pm.family} adapter does not match this model"
            )
        with _one_thread(self.index.counted.device):
            check_finite(self.squares, self.index)
            self.squares = []
            self.checks.check()  # the first batches' additivity, every layer not yet checked
            for acc in self.accumulators:
                acc.end_layers()
        self.batches_done += 1


def _sample_picker(index: TokenIndex):
    """The picker of the tokens the additivity check reads in this batch: for a batch where every position
    counts (the stream's usual one), the same for every batch of its shape, so found once."""
    if index.all:
        return _full_batch_picker(tuple(index.counted.shape), index.counted.device)
    return picker(sample_counted(index.counted))


@functools.lru_cache(maxsize=16)
def _full_batch_picker(shape: tuple[int, int], device: torch.device):
    return picker(sample_counted(torch.ones(shape, dtype=torch.bool, device=device)))


def as_btd(x: torch.Tensor, B: int, T: int) -> torch.Tensor:
    """Some models (OPT) flatten tokens to (B*T, d) inside a layer; restore (B, T, d)."""
    if x.ndim == 2 and x.shape[0] == B * T:
        return x.view(B, T, -1)
    return x


@contextlib.contextmanager
def _one_thread(device: torch.device):
    """Run the statistics single-threaded on CPU: their tensors are small, and an intra-op thread pool on a
    busy machine costs milliseconds of fork/join stalls per operation (measured: 25 ms for a 2048-element
    sqrt with 2 threads under load, 0.01 ms with 1)."""
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1:  # nothing to change (set_num_threads is not free)
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
