"""run_probe(): stream data through a model and return the tidy per-layer statistics and provenance (the
library's `tp.probe` and `tlm probe` call it; the library side is tlm_probe/api/library.py).

What --stats asks and what this model gives of it: plan.py. Two passes, both driven from here:
1. the stream (stream.py): the backend (native hooks, TransformerLens, nnsight) captures each layer's
   pieces and feeds the StatSink and the alignment accumulators (stats/); the first `max_sequences`
   sequences' ids are kept (nothing else) when importance statistics were asked;
2. the importance pass (second_pass.py, importance/suite.py) over those sequences, on the same adapter
   taps: clean forward, batched ablations, gradients, only the parts the asked statistics need. Zero and skip
   ablations of the kept sequences run in the stream instead, right after its forward of each batch
   (importance/stream_ablations.py), where the stream's forward is the clean one they need.
Under torchrun (WORLD_SIZE > 1) each rank probes sequences i % world == rank; every statistic is a sum
all-reduced across ranks (equal to one process), or refused under torchrun with its reason in provenance.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from dataclasses import replace
from pathlib import Path

import torch

from tlm_probe import importance as imp
from tlm_probe import ranks
from tlm_probe.allocator import keep_freed_memory
from tlm_probe.api_names import renamed_keywords
from tlm_probe.capture import ProbeModel, as_probe_model, load_probe_model
from tlm_probe.capture.attention import EAGER, eager_attention
from tlm_probe.capture.dispatch import input_device, placement
from tlm_probe.capture.sink import StatSink
from tlm_probe.data import sequences as sq
from tlm_probe.errors import UserError
from tlm_probe.models.device import resolve_device_name
from tlm_probe.probe.options import ProbeOptions
from tlm_probe.probe.plan import StatPlan, check_dispatch, plan_stats, stream_accumulators_for
from tlm_probe.probe.rows import (
    NO_MLP_NOTE,
    agreement_rows,
    agreement_table,
    matrix_table,
    result_table,
    without_absent_mlps,
)
from tlm_probe.probe.second_pass import fused_ablations, importance_record, importance_stats, second_pass
from tlm_probe.probe.stream import Stream, backend_class, hashed, read_sequences
from tlm_probe.results import ProbeResult
from tlm_probe.statistic_names import ci_methods
from tlm_probe.stats.reduce import all_reduce_int


@renamed_keywords(allow_pickle="unsafe_pickle")
def run_probe(model: str | Path | ProbeModel | torch.nn.Module, opts: ProbeOptions, progress: bool = False,
              trust_remote_code: bool = False, unsafe_pickle: bool = False) -> ProbeResult:
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
        plan, refused_here, accs = stream_accumulators_for(pm, plan, opts.backend, shown)
        sink = StatSink(pm, accs, guardrails=opts.guardrails)
        backend = backend_cls(sink) if accs else None
        keep = imp_opts.max_sequences if plan.importance else 0
        digest = hashlib.sha256()
        importance = importance_stats(pm, plan, world)  # (what this model can give, refused with why)
        fused = fused_ablations(importance[0], plan, imp_opts, backend) if keep else None
        stream = Stream(pm, sink, backend, opts, keep, rank, world, fused)
        with eager_attention(pm) if plan.attention else contextlib.nullcontext() as attention:
            stream.run(sq.shard(hashed(seqs, digest), rank, world), shown)
        for acc in accs:
            acc.all_reduce_()
        n_tokens = all_reduce_int(stream.n_tokens)
        if n_tokens == 0:
            raise UserError(f"no tokens to probe in {str(opts.data)[:80]!r}")
        rows, mats, info, refused = second_pass(pm, plan, importance, imp_opts, stream, shown)
    rows = without_absent_mlps([r for acc in accs for r in acc.rows()] + rows, pm.d_ff)
    agreement, target = agreement_rows(rows, plan, pm.n_layers)
    table = result_table(pm, [r for r in rows if r["statistic"] in plan.asked])
    matrices = matrix_table(pm, [m for acc in accs for m in acc.matrix_rows()] + mats)
    prov = _provenance(pm, opts, (n_tokens, world, time.time() - started, digest.hexdigest()),
                       refused_here, attention)
    if info is not None:
        prov["importance"] = importance_record(info, plan, refused, agreement, target)
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


def _provenance(pm: ProbeModel, opts: ProbeOptions, run: tuple, refused_here: dict, attention) -> dict:
    """provenance.json but for its importance record; run = (tokens, world size, seconds, data hash)."""
    from tlm_probe.results import build_provenance

    prov = build_provenance(pm, opts, *run, device=input_device(pm.model))
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
