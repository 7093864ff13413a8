"""probe(): stream data through a model and return tidy per-layer statistics as a DataFrame.

    df = probe("runs/demo/cosine", "builtin:pydoc", max_tokens=20_000)

The backend (native hooks, TransformerLens, nnsight) only decides how each layer's pieces are captured;
all of them feed the same StatSink and accumulators. Under torchrun (WORLD_SIZE > 1) each rank probes
sequences i % world == rank and the accumulators' sums are all-reduced, which equals one process.
"""

from __future__ import annotations

import importlib
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
import torch

from tlm_probe.capture import ProbeModel, load_probe_model
from tlm_probe.capture import sequences as sq
from tlm_probe.capture.sink import StatSink
from tlm_probe.data.bucketing import bucket_by_length
from tlm_probe.errors import UserError
from tlm_probe.stats import Batch, TokenIndex, build_accumulators

# backend name -> "module:class", imported on use (nnsight and transformer_lens are heavy)
BACKENDS = {
    "native": "tlm_probe.capture.native:NativeBackend",
    "transformer-lens": "tlm_probe.capture.tl_backend:TransformerLensBackend",
    "nnsight": "tlm_probe.capture.nnsight_backend:NNsightBackend",
}
DEFAULT_SEQ_LEN = 256
RESULT_COLUMNS = [
    "model",
    "layer",
    "depth",
    "statistic",
    "value",
    "ci_low",
    "ci_high",
    "n_tokens",
    "d_ff",
    "std",
]
MATRIX_COLUMNS = ["model", "layer_i", "layer_j", "statistic", "value"]


@dataclass
class ProbeOptions:
    """Everything that shapes a probe run besides the model (recorded in provenance)."""

    data: str = "builtin:pydoc"
    """Data source: builtin:pydoc, a text file/folder/glob, file.jsonl[:field], hf:NAME, or token ids."""
    stats: str = "alignment"
    """Statistic sets or names, comma separated (alignment, all, align_mlp_mid, ...)."""
    backend: str = "native"
    """native | transformer-lens | nnsight"""
    seq_len: int | None = None
    """Tokens per sequence (None: 256, or the model's context if shorter)."""
    max_tokens: int | None = 65_536
    """Stop after this many tokens (None: all the data)."""
    batch_size: int = 8
    """Sequences per forward pass."""
    exclude_bos: bool = False
    """Leave position 0 out of every token mean."""
    device: str = "cpu"
    dtype: str = "float32"
    split: str = "all"
    """train | val | all, for sources with a deterministic split."""
    guardrails: bool = True
    """Check that the captured pieces add up (cheap; turn off only to measure its cost)."""
    length_bucketing: bool = True
    """Batch sequences of similar length together (less padding) when every statistic ignores order."""
    importance: dict = field(default_factory=dict)
    """Options of the importance set (tlm_probe.importance.suite.ImportanceOptions fields)."""


@dataclass
class ProbeResult:
    table: pd.DataFrame
    matrices: pd.DataFrame | None
    provenance: dict = field(default_factory=dict)


def _backend(name: str):
    if name not in BACKENDS:
        raise UserError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def _dist() -> tuple[int, int, bool]:
    """(rank, world, created) from torchrun's environment; makes a gloo group if world > 1 and none exists."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, False
    import torch.distributed as dist

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo")  # the reduced states are small CPU tensors: gloo everywhere
    return dist.get_rank(), world, created


def _rank_device(device: str, world: int) -> str:
    """Under torchrun, plain "cuda" means this rank's GPU."""
    return f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if device == "cuda" and world > 1 else device


def run_probe(
    model: str | Path | ProbeModel,
    opts: ProbeOptions,
    progress: bool = False,
    trust_remote_code: bool = False,
    allow_pickle: bool = False,
) -> ProbeResult:
    """Probe `model` and return the tidy tables and provenance (the CLI writes them to disk)."""
    started = time.time()
    rank, world, created = _dist()
    opts = replace(opts, device=_rank_device(opts.device, world))
    pm = (
        model
        if isinstance(model, ProbeModel)
        else load_probe_model(
            model, opts.device, opts.dtype, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle
        )
    )
    opts = replace(
        opts, seq_len=opts.seq_len or min(DEFAULT_SEQ_LEN, sq.max_positions(pm) or DEFAULT_SEQ_LEN)
    )
    sq.check_seq_len(pm, opts.seq_len)
    accs = build_accumulators(opts.stats, pm.n_layers, pm.d_ff)
    sink = StatSink(pm, accs, guardrails=opts.guardrails)
    backend = _backend(opts.backend)(sink)
    for acc in accs:  # sets that need the model itself (importance: ablations, gradients)
        if hasattr(acc, "bind"):
            acc.bind(pm, opts.exclude_bos, accs, opts.importance, progress and rank == 0)
    seqs = sq.limit_tokens(sq.token_sequences(pm, opts.data, opts.seq_len, opts.split), opts.max_tokens)
    n_tokens = _run_batches(pm, sink, backend, sq.shard(seqs, rank, world), opts, progress and rank == 0)
    n_tokens = _all_reduce(accs, n_tokens, world)
    if created:
        torch.distributed.destroy_process_group()
    if n_tokens == 0:
        raise UserError(f"no tokens to probe in {str(opts.data)[:80]!r}")
    from tlm_probe.report import build_provenance

    table, matrices = _table(pm, accs), _matrices(pm, accs)
    prov = build_provenance(pm, opts, n_tokens, world, time.time() - started)
    for acc in accs:
        prov.update(getattr(acc, "provenance", dict)())
    return ProbeResult(table, matrices, prov)


def _run_batches(pm, sink, backend, seqs, opts: ProbeOptions, progress: bool) -> int:
    full = any(a.needs_output for a in sink.accumulators)
    n_tokens = 0
    bar = _progress(progress)
    with bar, torch.inference_mode():
        task = bar.add_task("probing", total=opts.max_tokens) if progress else None
        seqs = bucket_by_length(seqs, opts.batch_size) if _order_free(opts, sink.accumulators) else seqs
        for ids, mask in sq.batches(seqs, opts.batch_size, sq.pad_id(pm), opts.device):
            index = TokenIndex(mask, opts.exclude_bos)
            sink.start_batch(index)
            out = backend.run(ids, mask, full_output=full)
            sink.end_batch()
            batch = Batch(ids, mask, index, out)
            for acc in sink.accumulators:
                acc.end_batch(batch)
            n_tokens += int(mask.sum())
            if progress:
                bar.update(task, advance=int(mask.sum()))
    return n_tokens


def _order_free(opts: ProbeOptions, accs) -> bool:
    """Bucketing reorders sequences: only when every accumulator says its sums ignore order."""
    return opts.length_bucketing and all(getattr(a, "order_free", False) for a in accs)


def _progress(enabled: bool):
    if not enabled:
        return _NoBar()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        "tokens",
        TimeRemainingColumn(),
        transient=True,
    )


class _NoBar(nullcontext):
    def add_task(self, *a, **k):
        return None


def _all_reduce(accs, n_tokens: int, world: int) -> int:
    if world <= 1:
        return n_tokens
    import torch.distributed as dist

    for acc in accs:
        dist.all_reduce(acc.state, op=dist.ReduceOp.SUM)  # states are sums: the reduce is a merge
    total = torch.tensor([n_tokens], dtype=torch.float64)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return int(total.item())


def _table(pm: ProbeModel, accs) -> pd.DataFrame:
    rows = [r for acc in accs for r in acc.rows()]
    df = pd.DataFrame(rows)
    df["model"] = pm.name
    per_layer = df["layer"] >= 0  # layer -1: per-model rows (importance proxy agreement)
    df["depth"] = (df["layer"] / max(pm.n_layers - 1, 1)).where(per_layer)
    df["d_ff"] = pd.array([pm.d_ff[l] if l >= 0 else None for l in df["layer"]], dtype="Int64")
    extra = [c for c in df.columns if c not in RESULT_COLUMNS and c != "n_sequences"]
    return df[RESULT_COLUMNS + extra]


def _matrices(pm: ProbeModel, accs) -> pd.DataFrame | None:
    rows = [r for acc in accs for r in acc.matrix_rows()]
    if not rows:
        return None
    df = pd.DataFrame(rows)
    df["model"] = pm.name
    return df[MATRIX_COLUMNS]


def probe(
    model: str | Path | ProbeModel,
    data="builtin:pydoc",
    *,
    stats: str = "alignment",
    backend: str = "native",
    seq_len: int | None = None,
    max_tokens: int | None = 65_536,
    batch_size: int = 8,
    exclude_bos: bool = False,
    device: str = "cpu",
    dtype: str = "float32",
    split: str = "all",
    progress: bool = False,
    trust_remote_code: bool = False,
    allow_pickle: bool = False,
    importance: dict | None = None,
    full: bool = False,
) -> pd.DataFrame | ProbeResult:
    """Probe a model; returns the tidy result table with its provenance in df.attrs["provenance"].

    With full=True, a ProbeResult (table, matrices, provenance): the layer x layer matrices are not put in
    attrs, because pandas compares attrs when concatenating tables of several models.
    """
    opts = ProbeOptions(
        data=data,
        stats=stats,
        backend=backend,
        seq_len=seq_len,
        max_tokens=max_tokens,
        batch_size=batch_size,
        exclude_bos=exclude_bos,
        device=device,
        dtype=dtype,
        split=split,
        importance=dict(importance or {}),
    )
    res = run_probe(
        model, opts, progress=progress, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle
    )
    res.table.attrs["provenance"] = res.provenance
    return res if full else res.table
