"""The probe's first pass: the token sequences it reads (data/sequences.py cuts them; the split and the
sequence length are settled here), the backend that captures each batch, and the Stream that feeds the
sink, counts the tokens and keeps the sequences the importance pass runs on."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import numpy as np
import torch

from tlm_probe.capture import ProbeModel
from tlm_probe.capture.backends import BACKENDS
from tlm_probe.capture.inputs import check_seq_len, max_positions
from tlm_probe.data import sequences as sq
from tlm_probe.data.bucketing import bucket_by_length
from tlm_probe.data.sources import resolve_split
from tlm_probe.probe.options import DEFAULT_SEQ_LEN, ProbeOptions
from tlm_probe.progress import Ticker
from tlm_probe.stats.accumulator import Batch
from tlm_probe.stats.pieces import TokenIndex


def backend_class(name: str, model=None):
    """The backend class; one that cannot serve `model` (a folder or hub name) refuses it before the load."""
    cls = BACKENDS.get(name)
    if model is not None and not isinstance(model, ProbeModel) and hasattr(cls, "check_source"):
        cls.check_source(model)
    return cls


def read_sequences(pm: ProbeModel, opts: ProbeOptions, where_from):
    """(opts with the split read and the sequence length settled, the token sequences to probe)."""
    opts = replace(opts, split=resolve_split(opts.split, opts.data, where_from))  # provenance: the split read
    source = sq.read_source(opts.data, opts.split)  # a token file is read once, here
    natural = sq.row_length(source, opts.split)  # a 2-D token array: its rows are the sequences
    default = natural or min(DEFAULT_SEQ_LEN, max_positions(pm) or DEFAULT_SEQ_LEN)
    opts = replace(opts, seq_len=opts.seq_len or default)
    check_seq_len(pm, opts.seq_len)
    seqs = sq.token_sequences(source, opts.seq_len, pm.tokenizer, pm.vocab_size, opts.split,
                              str(opts.data)[:80], model=pm.name)
    seqs = sq.limit_tokens(seqs, opts.max_tokens or None)  # 0: all
    if opts.half:  # one of two disjoint halves: every other sequence
        seqs = (s for i, s in enumerate(seqs) if i % 2 == "ab".index(opts.half))
    return opts, seqs


def hashed(seqs, digest):
    """The sequences, unchanged, each fed to `digest` as it passes: int64 little-endian ids, then its length
    (so [1, 2][3] and [1][2, 3] differ). Every rank sees the whole stream before sharding: one hash."""
    for seq in seqs:
        ids = np.asarray(seq.cpu() if isinstance(seq, torch.Tensor) else seq, dtype="<i8")
        digest.update(ids.tobytes())
        digest.update(len(ids).to_bytes(8, "little"))
        yield seq


class Stream:
    """The first pass: batches through the backend into the sink (if any alignment statistic was asked),
    counting tokens, and keeping the ids of sequences with global index < keep for the importance pass."""

    def __init__(self, pm, sink, backend, opts: ProbeOptions, keep: int, rank: int, world: int, fused=None):
        """fused: importance.StreamAblations, run on each kept batch right after its forward here."""
        self.pm, self.sink, self.backend, self.opts = pm, sink, backend, opts
        self.keep, self.rank, self.world, self.fused = keep, rank, world, fused
        self.kept: list[dict] = []
        self.n_tokens, self.n_seqs = 0, 0

    def run(self, seqs, progress: bool) -> None:
        if order_free(self.opts, self.sink.accumulators if self.sink is not None else [], self.keep):
            seqs = bucket_by_length(seqs, self.opts.batch_size)
        bar = Ticker("probing", self.opts.max_tokens or None, "tokens", enabled=progress)
        held = getattr(self.backend, "held", contextlib.nullcontext)  # hooks kept for the whole stream
        with bar, torch.inference_mode(), contextlib.ExitStack() as hooks:
            holding = self.fused is None  # hooked before the first batch unless ablated forwards come first
            if holding:
                hooks.enter_context(held())
            pad = sq.pad_id(self.pm.tokenizer)
            for ids, mask in sq.batches(seqs, self.opts.batch_size, pad, self.opts.device):
                if not holding and self._kept(1)[0][0] >= self.keep:
                    hooks.enter_context(held())  # once no ablated forward (run without taps) is left
                    holding = True
                if self.backend is not None:
                    self._forward(ids, mask)
                self._keep(ids, mask)
                n = int(mask.sum())
                self.n_tokens += n
                bar.advance(n)

    def _forward(self, ids, mask) -> None:
        index = TokenIndex(mask, self.opts.exclude_bos)
        self.sink.start_batch(index)
        rows = self._kept(ids.shape[0])[1] if self.fused is not None else ()
        full = any(a.needs_output for a in self.sink.accumulators) or len(rows) > 0
        with self.fused.recording() if len(rows) else contextlib.nullcontext():
            out = self.backend.run(ids, mask, full_output=full)
        self.sink.end_batch()
        batch = Batch(ids, mask, index, out)
        for acc in self.sink.accumulators:
            acc.end_batch(batch)
        if len(rows):  # this batch's ablations, from its clean forward just run
            self.fused.update(ids, mask, out, rows.to(ids.device))

    def _kept(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(global index, local rows kept) of the next batch of n rows."""
        glob = (torch.arange(n) + self.n_seqs) * self.world + self.rank
        return glob, (glob < self.keep).nonzero()[:, 0]

    def _keep(self, ids, mask) -> None:
        """Local sequence j of this rank is global sequence j * world + rank (sq.shard deals round robin)."""
        if not self.keep:  # no importance pass: nothing to keep
            self.n_seqs += ids.shape[0]
            return
        glob, rows = self._kept(ids.shape[0])
        self.n_seqs += ids.shape[0]
        if len(rows):
            self.kept.append(
                {"input_ids": ids[rows].cpu(), "attention_mask": mask[rows].cpu(), "seq_index": glob[rows]}
            )


def order_free(opts: ProbeOptions, accs, keep: int = 0) -> bool:
    """Bucketing reorders sequences: only when every accumulator says its sums ignore order and no
    importance pass needs the sequences in their global order (it keeps the first `keep`)."""
    return opts.length_bucketing and keep == 0 and all(getattr(a, "order_free", False) for a in accs)
