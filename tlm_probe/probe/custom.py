"""The probe's first pass with a caller's accumulators (a handle's `stream`): the same sequences, batches,
backend, sink, guardrails and torchrun merging as `probe()`, one engine (probe/stream.py's Stream)."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import torch

from tlm_probe import ranks
from tlm_probe.capture import ProbeModel
from tlm_probe.capture.dispatch import input_device
from tlm_probe.capture.sink import StatSink
from tlm_probe.data import sequences as sq
from tlm_probe.errors import UserError
from tlm_probe.probe.options import ProbeOptions
from tlm_probe.probe.rows import result_table
from tlm_probe.probe.stream import Stream, backend_class, read_sequences
from tlm_probe.stats.accumulator import Accumulator
from tlm_probe.stats.reduce import all_reduce_int


def stream_accumulators(pm: ProbeModel, accumulators: list[Accumulator], opts: ProbeOptions,
                        progress: bool = False) -> tuple[pd.DataFrame, int]:
    """Stream opts.data through `pm` into `accumulators`; (their rows as the tidy result table, with the
    data split read in attrs["provenance"], tokens).
    The inputs go where the model is (its first block's device), whatever opts.device says."""
    opts = replace(opts, device=input_device(pm.model))
    rank, world = ranks.rank(), ranks.world()
    with ranks.process_group():
        opts, seqs = read_sequences(pm, opts, pm.path or pm)
        sink = StatSink(pm, accumulators, guardrails=opts.guardrails)
        stream = Stream(pm, sink, backend_class(opts.backend)(sink), opts, 0, rank, world)
        with torch.inference_mode():
            stream.run(sq.shard(seqs, rank, world), progress and rank == 0)
        for acc in accumulators:
            acc.all_reduce_()
        n_tokens = all_reduce_int(stream.n_tokens)
    if n_tokens == 0:
        raise UserError(f"no tokens to stream in {str(opts.data)[:80]!r}")
    table = result_table(pm, [r for acc in accumulators for r in acc.rows()])
    table.attrs["provenance"] = {"data": {"split": opts.split}}  # the split read: a figure's title says it
    return table, n_tokens
