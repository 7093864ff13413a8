"""`tlm diff --stats`: the per-layer difference A − B of probe statistics, with a 95% CI paired by sequence.

Both models read the same sequences, so each statistic's per-token values of A and B stand on the same
tokens. The probe's own machinery computes them: each model gets the accumulator `tlm probe --stats` builds
(stats.build_accumulators, fed by a StatSink through the native backend's hooks, guardrails included) and
its moments (stats.SequenceMoments) give value_a and value_b exactly as `tlm probe` would. The one addition
is a recording of the per-token values each accumulator adds to its moments: their difference A − B, token
by token, goes into one more SequenceMoments, whose mean is value_a − value_b (the same tokens are counted
on both sides) and whose interval is the probe's clustered one over the per-sequence sums of the paired
differences: with sequences of equal length, exactly the t interval of the per-sequence mean differences.
Layer l of A is paired with the layer of B that the drift uses (engine.pairing: the same layer at equal
depths, else the same relative depth). Every state is a sum: all_reduce_ merges torchrun ranks exactly.
"""

from __future__ import annotations

import contextlib

import torch

from tlm_probe.capture.native import NativeBackend
from tlm_probe.capture.probe_model import ProbeModel
from tlm_probe.capture.sink import StatSink
from tlm_probe.stats.alignment import build_accumulators
from tlm_probe.stats.moments import SequenceMoments
from tlm_probe.stats.pieces import TokenIndex

CI_OVER_SEQUENCES = ("95% t interval over sequences of the paired per-sequence differences A − B (the "
                     "probe's clustered interval, stats/moments.py)")
CI_OVER_SEEDS = "95% paired t interval over seeds of the per-seed differences A − B"


class _Recording(SequenceMoments):
    """SequenceMoments that also keeps the per-token values of the current batch, by slot."""

    def __init__(self, inner: SequenceMoments):
        self.state = inner.state  # the accumulator's own sums: nothing else changes
        self.values: torch.Tensor | None = None

    def start(self, slots: int, n: int) -> None:
        self.values = torch.full((slots, n), float("nan"), dtype=torch.float64)

    def add_tokens(self, slots: torch.Tensor, values: torch.Tensor, index) -> None:
        self.values[slots.cpu()] = values.detach().to("cpu", torch.float64)
        super().add_tokens(slots, values, index)


class _Side:
    """One model's probe accumulator, its sink and backend, and the recording of its values."""

    def __init__(self, pm: ProbeModel, stats: tuple[str, ...]):
        (self.acc,) = build_accumulators(stats, pm.n_layers, pm.d_ff)
        self.acc.moments = self.rec = _Recording(self.acc.moments)
        self.sink = StatSink(pm, [self.acc])
        self.backend = NativeBackend(self.sink)
        self.slots = len(stats) * pm.n_layers

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, index: TokenIndex):
        self.rec.start(self.slots, len(index.seq))
        self.sink.start_batch(index)
        out = self.backend.run(ids, mask, full_output=True)
        self.sink.end_batch()  # the accumulator adds the batch's values to its moments (and the recording)
        return out


class PairedStats:
    """The asked statistics of A and B on the same batches, and their paired differences."""

    def __init__(self, pa: ProbeModel, pb: ProbeModel, stats: tuple[str, ...], pair: list[int]):
        self.stats, self.pair = stats, pair
        self.sides = _Side(pa, stats), _Side(pb, stats)
        self.n_a, self.n_b = pa.n_layers, pb.n_layers
        self.rows_a = torch.tensor([i * self.n_a + l for i in range(len(stats)) for l in range(self.n_a)])
        self.rows_b = torch.tensor([i * self.n_b + j for i in range(len(stats)) for j in pair])
        self.diff = SequenceMoments(len(stats) * self.n_a)

    @contextlib.contextmanager
    def held(self):
        """Both backends' hooks, registered for the whole stream."""
        with self.sides[0].backend.held(), self.sides[1].backend.held():
            yield

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, exclude_bos: bool):
        """Both models' forward passes (with the statistics' hooks); returns their outputs (logits)."""
        index = TokenIndex(mask, exclude_bos)
        outs = [side.forward(ids, mask, index) for side in self.sides]
        values_a, values_b = (side.rec.values for side in self.sides)
        d = values_a[self.rows_a] - values_b[self.rows_b]
        self.diff.add_tokens(torch.arange(len(self.rows_a)), d, _cpu(index))
        return outs

    def all_reduce_(self) -> None:
        for side in self.sides:
            side.acc.all_reduce_()
        self.diff.all_reduce_()

    def rows(self) -> list[dict]:
        """One row per statistic and layer of A: value_a, value_b, diff, its CI, n (sequences)."""
        a, b = ({(r["statistic"], r["layer"]): r for r in side.acc.rows()} for side in self.sides)
        out = []
        for i, stat in enumerate(self.stats):
            for l, j in enumerate(self.pair):
                d = self.diff.summary(i * self.n_a + l)
                out.append({"layer": l, "layer_b": j, "depth": l / max(self.n_a - 1, 1), "statistic": stat,
                            "value_a": a[stat, l]["value"], "value_b": b[stat, j]["value"],
                            "diff": d["value"], "ci_low": d["ci_low"], "ci_high": d["ci_high"],
                            "n": d["n_sequences"], "n_tokens": d["n_tokens"]})
        return out


def _cpu(index: TokenIndex) -> TokenIndex:
    """The batch's token index on the CPU, where the recorded values are."""
    return index if index.counted.device.type == "cpu" else TokenIndex(index.counted.cpu())
