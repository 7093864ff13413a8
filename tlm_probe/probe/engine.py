"""probe(): stream data through a model and return tidy per-layer statistics as a DataFrame.

    df = probe("runs/demo/cosine", "builtin:pydoc", max_tokens=20_000)

Two passes, both driven from here:
1. the stream: the backend (native hooks, TransformerLens, nnsight) captures each layer's pieces and
   feeds the StatSink and the alignment accumulators (stats/); the first `max_sequences` sequences' ids
   are kept (nothing else) when importance statistics were asked;
2. the importance pass (importance/suite.py) over those sequences, on the same adapter taps: clean
   forward, batched ablations, gradients, only the parts the asked statistics need. Zero and skip
   ablations of the kept sequences run in the stream instead, right after its forward of each batch
   (importance/stream_ablations.py), where the stream's forward is the clean one they need.
Under torchrun (WORLD_SIZE > 1) each rank probes sequences i % world == rank; every statistic is a sum
all-reduced across ranks (equal to one process), or refused under torchrun with its reason in provenance.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from tlm_probe import importance as imp
from tlm_probe import ranks
from tlm_probe.allocator import keep_freed_memory
from tlm_probe.api_names import renamed_keywords
from tlm_probe.capture import ProbeModel, as_probe_model, load_probe_model
from tlm_probe.capture import sequences as sq
from tlm_probe.capture.attention import EAGER, eager_attention, pattern_refusal
from tlm_probe.capture.backends import BACKENDS
from tlm_probe.capture.dispatch import input_device, placement
from tlm_probe.capture.guardrails import NO_MLP, unavailable
from tlm_probe.capture.sink import StatSink
from tlm_probe.data.bucketing import bucket_by_length
from tlm_probe.data.sources import resolve_split
from tlm_probe.errors import UserError
from tlm_probe.models.device import resolve_device_name
from tlm_probe.probe.options import DEFAULT_SEQ_LEN, ProbeOptions
from tlm_probe.probe.rows import (
    NO_MLP_NOTE,
    agreement_rows,
    agreement_table,
    matrix_table,
    result_table,
    why_no_agreement,
    without_absent_mlps,
)
from tlm_probe.progress import Ticker, say, tick
from tlm_probe.results import ProbeResult
from tlm_probe.statistic_names import ATTENTION, STATISTICS, asked_statistics, ci_methods
from tlm_probe.stats.accumulator import Batch
from tlm_probe.stats.alignment import PER_TOKEN as ALIGNMENT
from tlm_probe.stats.alignment import build_accumulators
from tlm_probe.stats.attention import AttentionEntropyAccumulator
from tlm_probe.stats.pieces import TokenIndex
from tlm_probe.stats.reduce import all_reduce_int
from tlm_probe.threads import torch_threads

NEURON_STATS = ("dead_neuron_frac", "stable_rank_mlp_out")
"""Importance statistics that read the MLP neurons (the mlp_post tap) or the down projection's weights."""


@dataclass(frozen=True)
class StatPlan:
    """What --stats asked for (the rows written) and what must be computed for it (plus dependencies)."""

    asked: tuple[str, ...]
    alignment: tuple[str, ...]
    importance: tuple[str, ...]
    attention: tuple[str, ...] = ()
    """Statistics of the attention weights (stats/attention.py), streamed with the alignment ones."""


def plan_stats(spec: str) -> StatPlan:
    """Resolve set and statistic names (statistic_names.py; ProbeOptions checked them at start-up)."""
    asked = asked_statistics(spec)
    computed = list(asked)
    for s in asked:  # spearman_<proxy> needs its proxy and the ablation target
        if s.startswith("spearman_"):
            computed += [d for d in imp.spearman_parts(s) if d not in computed]
    return StatPlan(
        tuple(asked),
        tuple(s for s in ALIGNMENT if s in computed),
        tuple(s for s in STATISTICS if s in computed and s not in imp.AGREEMENT),
        tuple(s for s in ATTENTION if s in computed),
    )


def backend_class(name: str, model=None):
    """The backend class; one that cannot serve `model` (a folder or hub name) refuses it before the load."""
    cls = BACKENDS.get(name)
    if model is not None and not isinstance(model, ProbeModel) and hasattr(cls, "check_source"):
        cls.check_source(model)
    return cls


RESIDENT = frozenset({"grad", "grad_per_sequence"})
"""Needs (statistic_names.STATISTICS rows) that read or differentiate the weights themselves."""


def check_dispatch(opts: ProbeOptions, plan: StatPlan) -> None:
    """Under --device-map, refuse (before loading) the statistics that need every weight resident: an
    offloaded block's weights are swapped in for its forward only (gradients, and statistics of the
    weights themselves, would read placeholders)."""
    needs = {s: STATISTICS.get(s).needs for s in plan.importance}
    resident = [s for s, need in needs.items() if not need or need & RESIDENT]
    if opts.device_map and resident:
        raise UserError(f"{', '.join(resident)} need(s) every weight resident, which --device-map does not "
                        "keep; probe them without --device-map")


@renamed_keywords(allow_pickle="unsafe_pickle")
def run_probe(
    model: str | Path | ProbeModel | torch.nn.Module,
    opts: ProbeOptions,
    progress: bool = False,
    trust_remote_code: bool = False,
    unsafe_pickle: bool = False,
) -> ProbeResult:
    """Probe `model` and return the tidy tables and provenance (the CLI writes them to disk)."""
    started = time.time()
    if isinstance(model, torch.nn.Module):  # a model the caller already holds (with its tokenizer attribute)
        model = as_probe_model(model)
    keep_freed_memory()  # as the `tlm` command does, for a Python caller too (once per process)
    plan = plan_stats(opts.stats)  # names and options first: no model is loaded for a typo
    check_dispatch(opts, plan)
    imp_opts = imp.options_from({**opts.importance, "exclude_bos": opts.exclude_bos})
    backend_cls = backend_class(opts.backend, model)
    rank, world = ranks.rank(), ranks.world()
    opts = replace(opts, device=ranks.rank_device(resolve_device_name(opts.device)))
    shown = progress and rank == 0  # progress on rank 0 only
    with ranks.process_group():  # torchrun: this rank's share of the sequences, then every sum all-reduced
        pm, opts = _load(model, opts, plan, trust_remote_code=trust_remote_code, unsafe_pickle=unsafe_pickle)
        opts, seqs = read_sequences(pm, opts, getattr(model, "path", None) or model)
        plan, refused_here, accs = _accumulators(pm, plan, opts.backend, shown)
        sink = StatSink(pm, accs, guardrails=opts.guardrails)
        backend = backend_cls(sink) if accs else None
        keep = imp_opts.max_sequences if plan.importance else 0
        digest = hashlib.sha256()
        importance = _importance_stats(pm, plan, world)  # (what this model can give, refused with why)
        fused = _fused(importance[0], plan, imp_opts, backend) if keep else None
        stream = Stream(pm, sink, backend, opts, keep, rank, world, fused)
        with eager_attention(pm) if plan.attention else contextlib.nullcontext() as attention:
            stream.run(sq.shard(_hashed(seqs, digest), rank, world), shown)
        for acc in accs:
            acc.all_reduce_()
        n_tokens = all_reduce_int(stream.n_tokens)
        if n_tokens == 0:
            raise UserError(f"no tokens to probe in {str(opts.data)[:80]!r}")
        rows, mats, info, refused = _importance(pm, plan, importance, imp_opts, stream, shown)
    rows = without_absent_mlps([r for acc in accs for r in acc.rows()] + rows, pm.d_ff)
    agreement, target = agreement_rows(rows, plan, pm.n_layers)
    table = result_table(pm, [r for r in rows if r["statistic"] in plan.asked])
    matrices = matrix_table(pm, [m for acc in accs for m in acc.matrix_rows()] + mats)
    prov = _provenance(pm, opts, (n_tokens, world, time.time() - started, digest.hexdigest()),
                       refused_here, attention)
    if info is not None:
        prov["importance"] = _importance_record(info, plan, refused, agreement, target)
    return ProbeResult(table, matrices, prov, agreement=agreement_table(pm, agreement))


def _load(model, opts: ProbeOptions, plan: StatPlan, **load) -> tuple[ProbeModel, ProbeOptions]:
    """The model (loaded unless given), and opts.device where its inputs go under a device map."""
    if not isinstance(model, ProbeModel):
        model = load_probe_model(
            model, opts.device, opts.dtype, device_map=opts.device_map, max_memory=opts.max_memory,
            attn_implementation=EAGER if plan.attention else None,  # weights are formed only by eager
            **load,
        )
    if opts.device_map:  # the ids go where the first block is; accelerate moves them on from there
        opts = replace(opts, device=input_device(model.model))
    return model, opts


def read_sequences(pm: ProbeModel, opts: ProbeOptions, where_from):
    """(opts with the split read and the sequence length settled, the token sequences to probe)."""
    opts = replace(opts, split=resolve_split(opts.split, opts.data, where_from))  # provenance: the split read
    source = sq.read_source(opts.data, opts.split)  # a token file is read once, here
    natural = sq.row_length(source, opts.split)  # a 2-D token array: its rows are the sequences
    default = natural or min(DEFAULT_SEQ_LEN, sq.max_positions(pm) or DEFAULT_SEQ_LEN)
    opts = replace(opts, seq_len=opts.seq_len or default)
    sq.check_seq_len(pm, opts.seq_len)
    seqs = sq.token_sequences(pm, source, opts.seq_len, opts.split, str(opts.data)[:80])
    seqs = sq.limit_tokens(seqs, opts.max_tokens or None)  # 0: all
    if opts.half:  # one of two disjoint halves: every other sequence
        seqs = (s for i, s in enumerate(seqs) if i % 2 == "ab".index(opts.half))
    return opts, seqs


def _provenance(pm: ProbeModel, opts: ProbeOptions, run: tuple, refused_here: dict, attention) -> dict:
    """provenance.json but for its importance record; run = (tokens, world size, seconds, data hash)."""
    from tlm_probe.results import build_provenance

    prov = build_provenance(pm, opts, *run)
    prov["ci_methods"] = ci_methods()
    if opts.device_map:
        prov["dispatch"] = {"device_map": opts.device_map, "max_memory": opts.max_memory,
                            "placed": placement(pm.model)}
    if refused_here:
        prov["refused"] = refused_here
    if attention:
        prov["attention"] = attention
    no_mlp = [l for l, w in enumerate(pm.d_ff) if w == 0]
    if no_mlp:
        prov["no_mlp_layers"] = no_mlp
        prov["no_mlp_note"] = NO_MLP_NOTE
    return prov


def _importance_record(info: dict, plan: StatPlan, refused: dict, agreement: list, target) -> dict:
    """provenance.json's importance record, with the reason each asked agreement row is missing."""
    missing = {s: why_no_agreement(s, info["skipped"], refused) for s in plan.asked if s in imp.AGREEMENT}
    given = {r["statistic"] for r in agreement}
    info["skipped"].update({s: why for s, why in missing.items() if s not in given})
    return {**info, "agreement_target": target}


def _hashed(seqs, digest):
    """The sequences, unchanged, each fed to `digest` as it passes: int64 little-endian ids, then its length
    (so [1, 2][3] and [1][2, 3] differ). Every rank sees the whole stream before sharding: one hash."""
    for seq in seqs:
        ids = np.asarray(seq.cpu() if isinstance(seq, torch.Tensor) else seq, dtype="<i8")
        digest.update(ids.tobytes())
        digest.update(len(ids).to_bytes(8, "little"))
        yield seq


def _refuse_missing_pieces(pm: ProbeModel, plan: StatPlan, backend: str) -> tuple[StatPlan, dict]:
    """Drop the statistics this block kind cannot give (no MLP: only block-level ones; no attention: no
    attention statistics), with the reason; a UserError if nothing asked is left."""
    missing = unavailable(pm.block_kind, {s: ALIGNMENT[s][0] for s in plan.alignment})
    no_pattern = pattern_refusal(pm, backend) if plan.attention else None
    if no_pattern:
        missing |= {s: no_pattern for s in plan.attention}
    if pm.adapter.mlp is None:  # importance statistics of the MLP (ablations, gradients, neurons)
        missing |= {s: NO_MLP for s in plan.importance if "mlp" in s or s in NEURON_STATS}
    if pm.adapter.importance_refusal:  # the row says why the second pass is not offered (T5's decoder)
        missing |= {s: pm.adapter.importance_refusal for s in plan.importance}
    if not missing:
        return plan, {}
    if set(plan.asked) <= set(missing) | {s for s in plan.asked if s.startswith("spearman_")}:
        why = "; ".join(sorted(set(missing.values())))
        raise UserError(f"none of the asked statistics can be computed on this {pm.family} model: {why}")
    kept = replace(
        plan,
        alignment=tuple(s for s in plan.alignment if s not in missing),
        importance=tuple(s for s in plan.importance if s not in missing),
        attention=tuple(s for s in plan.attention if s not in missing),
    )
    return kept, {s: why for s, why in missing.items() if s in plan.asked}


def _accumulators(pm: ProbeModel, plan: StatPlan, backend: str, say_refused: bool):
    """(the plan this model can give, what was refused and why, the stream's accumulators); the refusals
    are said once (provenance["refused"] keeps them)."""
    plan, refused = _refuse_missing_pieces(pm, plan, backend)
    if refused and say_refused:
        _say_refused(pm, refused)
    accs = build_accumulators(plan.alignment, pm.n_layers, pm.d_ff)
    accs += [AttentionEntropyAccumulator(pm.n_layers, pm.d_ff)] if plan.attention else []
    return plan, refused, accs


def _say_refused(pm: ProbeModel, refused: dict[str, str]) -> None:
    """One line per reason: which asked statistics this model gets no rows of, and why."""
    by_reason: dict[str, list[str]] = {}
    for stat, why in refused.items():
        by_reason.setdefault(why, []).append(stat)
    for why, stats in by_reason.items():
        say(f"no rows of {', '.join(stats)} for this {pm.family} model: {why}")


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
        if _order_free(self.opts, self.sink.accumulators if self.sink is not None else [], self.keep):
            seqs = bucket_by_length(seqs, self.opts.batch_size)
        bar = Ticker("probing", self.opts.max_tokens or None, "tokens", enabled=progress)
        held = getattr(self.backend, "held", contextlib.nullcontext)  # hooks kept for the whole stream
        with bar, torch.inference_mode(), contextlib.ExitStack() as hooks:
            holding = self.fused is None  # hooked before the first batch unless ablated forwards come first
            if holding:
                hooks.enter_context(held())
            for ids, mask in sq.batches(seqs, self.opts.batch_size, sq.pad_id(self.pm), self.opts.device):
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


def _order_free(opts: ProbeOptions, accs, keep: int = 0) -> bool:
    """Bucketing reorders sequences: only when every accumulator says its sums ignore order and no
    importance pass needs the sequences in their global order (it keeps the first `keep`)."""
    return opts.length_bucketing and keep == 0 and all(getattr(a, "order_free", False) for a in accs)


def _importance(pm, plan: StatPlan, importance, opts, stream: Stream, progress: bool):
    """The second pass, on the kept sequences, of the statistics `importance` (_importance_stats) keeps;
    the refused ones get their reason in provenance. With progress, its expected cost is said first
    (importance/cost.py)."""
    kept = stream.kept
    if not plan.importance:
        return [], [], None, {}
    stats, refused = importance
    with torch.inference_mode(False):  # the stream ran under inference_mode; gradients need plain tensors
        batches = [{k: v.clone() for k, v in b.items()} for b in kept]
        notice = imp.CostNotice(stream.n_seqs) if progress else None
        rows, mats, info = imp.run_importance(
            pm, batches, stats, opts, _tracker(progress), notice, fused=stream.fused
        )
    asked = set(plan.asked)
    info["skipped"] = {k: v for k, v in {**refused, **info["skipped"]}.items() if k in asked}
    info["sequences"] = all_reduce_int(sum(len(b["input_ids"]) for b in kept))
    info["statistic_needs"] = {s: sorted(STATISTICS.get(s).needs) for s in plan.importance if s in asked}
    info["options"] = {k: v for k, v in opts.__dict__.items() if k != "probe_labels"}
    return rows, mats, info, refused


def _importance_stats(pm, plan: StatPlan, world: int) -> tuple[list[str], dict[str, str]]:
    """(the importance statistics this model and world size can give, the others with their reason)."""
    refused = imp.reasons(list(plan.importance), pm.is_causal and pm.lm_head() is not None, world)
    if pm.neuron_refusal:  # mixture of experts: no one neuron tensor per layer (capture/widths.py)
        refused |= {s: pm.neuron_refusal for s in plan.importance if s in NEURON_STATS}
    if pm.lens_refusal:  # a logit scale or soft cap after the head: the lens would not be the model's readout
        why = f"{pm.lens_refusal}; the lens (final norm + head) would not be the model's own readout"
        refused |= {s: why for s in plan.importance if "lens" in STATISTICS.get(s).needs}
    return [s for s in plan.importance if s not in refused], refused


def _fused(stats: list[str], plan: StatPlan, opts, backend):
    """The ablations of `stats` (the importance statistics kept) run in the stream
    (importance/stream_ablations.py) where its forward is the clean one the importance pass would run: the
    native backend's, not under eager attention."""
    if getattr(backend, "name", None) != "native" or plan.attention or not imp.fusable(stats):
        return None
    return imp.StreamAblations(backend.pm, stats, opts)


def _tracker(progress: bool):
    if not progress:
        return lambda it, description: it
    return lambda it, description: tick(it, description)


@renamed_keywords(allow_pickle="unsafe_pickle")
def probe(
    model: str | Path | ProbeModel | torch.nn.Module,
    data=None,
    options: ProbeOptions | None = None,
    *,
    progress: bool = False,
    trust_remote_code: bool = False,
    unsafe_pickle: bool = False,
    full: bool = False,
    threads: int = 0,
    **fields,
) -> pd.DataFrame | ProbeResult:
    """Probe a model; returns the tidy result table with its provenance in df.attrs["provenance"].

    `model`: a folder, hub name, .gguf file, ProbeModel, or an nn.Module already loaded (transformers' or
    ours; its `tokenizer` attribute is used for text data: `tlm_probe.probe(model, data, tokenizer=...)`
    takes one for a module that has none).

    `options` is a ProbeOptions (`tlm probe`'s options), or give its fields as keywords (`stats=`,
    `split=`, `importance={...}`, ...), which replace those of `options`. With full=True, a ProbeResult
    (table, matrices, provenance, path, agreement: the spearman_* rows, one per model and proxy, which are
    not rows of the per-layer table): the matrices and agreement are not put in attrs, because pandas
    compares attrs when concatenating tables of several models. unsafe_pickle: --unsafe-pickle; threads:
    --threads, torch's CPU threads for this call only (0 leaves them); allow_pickle= is the deprecated name
    of unsafe_pickle=.
    """
    if data is not None:
        fields["data"] = data
    if "importance" in fields:
        fields["importance"] = dict(fields["importance"] or {})
    opts = replace(options or ProbeOptions(), **fields)
    with torch_threads(threads, "threads"):
        res = run_probe(
            model, opts, progress=progress, trust_remote_code=trust_remote_code, unsafe_pickle=unsafe_pickle
        )
    res.table.attrs["provenance"] = res.provenance
    return res if full else res.table
