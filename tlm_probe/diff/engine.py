"""Diff two models on the same tokens, in one streamed pass and bounded memory (no activation is kept):

- layer correspondence: linear CKA of the residual stream (each block's output) between every layer of A
  and every layer of B, from accumulated Gram sums (stats/cka.py), and B's best-matching layer for each of A;
  the same for the MLP outputs (the contract's mlp_out tap of each family) when both models have MLPs;
- residual drift ||h_A - h_B|| / ||h_B|| per layer (mean over tokens), where the two streams have the same
  width: layer to layer when the depths are equal, else each layer of A against B's layer at the same
  relative depth (diff.json says which);
- per token KL(A || B) of the next-token distributions and dNLL = NLL_A - NLL_B, by position bucket and by
  the frequency of the target token in the probed text;
- with --stats, the per-layer difference A - B of probe statistics with a CI paired by sequence
  (paired_stats.py).
Under torchrun each rank streams its share of the sequences and every sum is all-reduced (tlm_probe/ranks.py).
Both models must read the same token ids (the same vocabulary size, and the same ids for a test string
when both have a tokenizer).
"""

from __future__ import annotations

import collections
import contextlib
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from tlm_probe.capture import load_probe_model
from tlm_probe.capture.finite import refuse_non_finite
from tlm_probe.capture.inputs import check_seq_len, max_positions
from tlm_probe.capture.native import first_tensor, register_taps
from tlm_probe.capture.probe_model import ProbeModel
from tlm_probe.data import sequences as sq
from tlm_probe.data.sources import resolve_split
from tlm_probe.diff.options import DiffOptions, diff_statistics
from tlm_probe.diff.paired_stats import CI_OVER_SEQUENCES, PairedStats
from tlm_probe.errors import UserError
from tlm_probe.models.device import resolve_device_name
from tlm_probe.ranks import process_group, rank, rank_device, world
from tlm_probe.stats.cka import LayerCKA
from tlm_probe.stats.reduce import all_reduce_, all_reduce_int

POSITION_EDGES = (0, 1, 4, 16, 64, 256, 1024)
"""Position buckets [0,1), [1,4), ..., [1024, inf): the first token, the first few, and so on."""
COUNT_EDGES = (1, 3, 11, 101)
"""Frequency buckets of a target token by its count in the probed text: 1-2, 3-10, 11-100, > 100."""
_CHECK_TEXT = "The quick brown fox, 1234 — ünïcode."
BUCKETS = (("position", POSITION_EDGES), ("target_count", COUNT_EDGES))


@dataclass
class DiffResult:
    summary: dict[str, Any]
    """diff.json: cka, best_match, drift, kl_mean, dnll_mean, buckets, stats, provenance."""
    cka: np.ndarray
    drift: list[float]


def bucket_label(edges: tuple[int, ...], i: int) -> str:
    hi = edges[i + 1] - 1 if i + 1 < len(edges) else None
    return f"{edges[i]}+" if hi is None else (str(edges[i]) if hi == edges[i] else f"{edges[i]}-{hi}")


class _Taps:
    """Hooks that keep, for one batch, each block's output (the residual stream after it: `out`) and, when
    the family has an MLP, what the MLP adds to the stream (the contract's mlp_out tap: `mlp`)."""

    def __init__(self, pm: ProbeModel):
        self.out: list[torch.Tensor | None] = [None] * pm.n_layers
        self.mlp: list[torch.Tensor | None] = [None] * pm.n_layers
        taps = pm.taps()
        wanted = {"out": taps["resid_post"], **({"mlp": taps["mlp_out"]} if "mlp_out" in taps else {})}
        self.has_mlp = "mlp" in wanted
        self.stack = contextlib.ExitStack()
        register_taps(pm, wanted, self._keep, self.stack)

    def _keep(self, layer: int, piece: str, tensor: torch.Tensor | None) -> None:
        getattr(self, piece)[layer] = tensor.detach()

    def close(self) -> None:
        self.stack.close()


def check_pair(pa: ProbeModel, pb: ProbeModel) -> None:
    if not (pa.is_causal and pb.is_causal):
        raise UserError("tlm diff compares next-token predictions: both models must be causal decoders")
    if pa.vocab_size != pb.vocab_size:
        raise UserError(f"the models read different vocabularies ({pa.vocab_size} vs {pb.vocab_size} ids)")
    ta, tb = pa.tokenizer, pb.tokenizer
    if ta is not None and tb is not None and _ids(ta, _CHECK_TEXT) != _ids(tb, _CHECK_TEXT):
        raise UserError("the models' tokenizers give different ids for the same text; diff needs one "
                        "tokenizer")
    lacking = [pm.name for pm in (pa, pb) if pm.tokenizer is None]
    if lacking and rank() == 0:  # a skipped check is said, in one line (issue 49)
        import sys

        print(f"note: {' and '.join(lacking)} {'has' if len(lacking) == 1 else 'have'} no tokenizer: the "
              "check that both models give the same ids to the same text was skipped (only the vocabulary "
              f"sizes were compared: {pa.vocab_size} ids)", file=sys.stderr)


def _ids(tok, text: str) -> list[int]:
    ids = tok(text, add_special_tokens=False)["input_ids"] if callable(tok) else tok.encode(text)
    return [int(i) for i in ids]


def pairing(n_a: int, n_b: int) -> tuple[list[int], str]:
    """B's layer paired with each layer of A for the drift, and how it was chosen."""
    if n_a == n_b:
        return list(range(n_a)), "layer"
    return [round(l * (n_b - 1) / max(n_a - 1, 1)) for l in range(n_a)], "relative depth"


class _Tokens:
    """KL and dNLL sums per position bucket and per target-frequency bucket: one fixed (bucket, 3) table
    of [kl, dnll, n], in the buckets' order, so that ranks' tables add."""

    def __init__(self, counts: collections.Counter):
        self.counts = counts
        self.keys = [(kind, bucket_label(edges, i)) for kind, edges in BUCKETS for i in range(len(edges))]
        self.sums = torch.zeros(len(self.keys), 3, dtype=torch.float64)

    def add(self, kl: torch.Tensor, dnll: torch.Tensor, pos: torch.Tensor, targets: torch.Tensor) -> None:
        freq = torch.tensor([self.counts[int(t)] for t in targets.tolist()], dtype=torch.long)
        values = torch.stack([kl.double(), dnll.double(), torch.ones_like(kl, dtype=torch.float64)], 1)
        first = 0
        for (_, edges), x in zip(BUCKETS, (pos, freq), strict=True):
            idx = torch.bucketize(x.long(), torch.tensor(edges), right=True) - 1 + first
            self.sums.index_add_(0, idx, values)
            first += len(edges)

    def all_reduce_(self) -> None:
        all_reduce_(self.sums)

    def rows(self) -> list[dict]:
        return [{"bucket_kind": k, "bucket": b, "kl_mean": v[0] / v[2], "dnll_mean": v[1] / v[2],
                 "n": int(v[2])} for (k, b), v in zip(self.keys, self.sums.tolist(), strict=True) if v[2] > 0]


def run_diff(model_a, model_b, opts: DiffOptions, *, trust_remote_code: bool = False,
             unsafe_pickle: bool = False) -> DiffResult:
    started = time.time()
    stats = diff_statistics(opts.stats)
    device = rank_device(resolve_device_name(opts.device))
    load = dict(trust_remote_code=trust_remote_code, unsafe_pickle=unsafe_pickle)
    pa = model_a if isinstance(model_a, ProbeModel) else load_probe_model(model_a, device, opts.dtype, **load)
    pb = model_b if isinstance(model_b, ProbeModel) else load_probe_model(model_b, device, opts.dtype, **load)
    check_pair(pa, pb)
    split = resolve_split(opts.split, opts.data, model_a)
    if split != "val" and resolve_split(opts.split, opts.data, model_b) == "val":
        split = "val"  # either model may have trained on the source: held-out text only
    opts = replace(opts, split=split, device=device)
    source = sq.read_source(opts.data, split)  # a token file is read once
    limits = [m for m in (max_positions(pa), max_positions(pb)) if m]
    seq_len = opts.seq_len or sq.row_length(source, split) or min([256, *limits])
    for pm in (pa, pb):
        check_seq_len(pm, seq_len)
    ids = sq.token_sequences(source, seq_len, pa.tokenizer, pa.vocab_size, split, str(opts.data)[:80],
                             model=pa.name)
    seqs = list(sq.limit_tokens(ids, opts.max_tokens or None))
    if not seqs:
        raise UserError(f"no tokens to compare in {str(opts.data)[:80]!r}")
    with process_group():  # torchrun: this rank's share of the sequences, then every sum all-reduced
        acc = _stream(pa, pb, seqs, opts, stats)
        acc.all_reduce_()
    return _result(pa, pb, acc, opts, time.time() - started)


@dataclass
class _Acc:
    cka: LayerCKA
    cka_mlp: LayerCKA | None
    drift_sum: torch.Tensor
    tokens: _Tokens
    pair: list[int]
    pairing: str
    stats: PairedStats | None = None
    n: int = 0

    def all_reduce_(self) -> None:
        """Sum every state over torchrun's ranks (nothing in one process)."""
        for cka in filter(None, (self.cka, self.cka_mlp)):
            for t in cka.tensors():
                all_reduce_(t)
            cka.n = all_reduce_int(cka.n)
        all_reduce_(self.drift_sum)
        self.tokens.all_reduce_()
        if self.stats is not None:
            self.stats.all_reduce_()
        self.n = all_reduce_int(self.n)


def _stream(pa: ProbeModel, pb: ProbeModel, seqs: list[list[int]], opts: DiffOptions,
            stats: tuple[str, ...] = ()) -> _Acc:
    """Every sum of this rank's share of `seqs` (all of them in one process); target counts are over all."""
    pair, how = pairing(pa.n_layers, pb.n_layers)
    taps = _Taps(pa), _Taps(pb)
    both_mlp = taps[0].has_mlp and taps[1].has_mlp
    acc = _Acc(LayerCKA(pa.n_layers, pa.d_model, pb.n_layers, pb.d_model),
               LayerCKA(pa.n_layers, pa.d_model, pb.n_layers, pb.d_model) if both_mlp else None,
               torch.zeros(pa.n_layers, dtype=torch.float64),
               _Tokens(collections.Counter(t for s in seqs for t in s)), pair, how,
               PairedStats(pa, pb, stats, pair) if stats else None)
    mine = sq.shard(seqs, rank(), world())
    try:
        with torch.no_grad(), acc.stats.held() if acc.stats else contextlib.nullcontext():
            for ids, mask in sq.batches(mine, opts.batch_size, sq.pad_id(pa.tokenizer), opts.device):
                _batch(pa, pb, taps, ids, mask, opts, acc)
    finally:
        for t in taps:
            t.close()
    return acc


def _batch(pa, pb, taps, ids: torch.Tensor, mask: torch.Tensor, opts: DiffOptions, acc: _Acc) -> None:
    if acc.stats is not None:  # the same forward passes feed the probe statistics' hooks too
        logits_a, logits_b = (first_tensor(o).float() for o in acc.stats.forward(ids, mask, opts.exclude_bos))
    else:
        logits_a = first_tensor(pa.forward(ids, mask)).float()  # (B, T, V)
        logits_b = first_tensor(pb.forward(ids, mask)).float()
    _refuse_non_finite(pa, taps[0], logits_a, mask.bool())
    _refuse_non_finite(pb, taps[1], logits_b, mask.bool())
    keep = mask.bool().clone()
    if opts.exclude_bos:
        keep[:, 0] = False
    flat = keep.reshape(-1)
    rows = lambda hs: [h.reshape(-1, h.shape[-1])[flat] for h in hs]  # noqa: E731  (n, d) kept tokens
    acc.cka.add(rows(taps[0].out), rows(taps[1].out))
    if acc.cka_mlp is not None:
        acc.cka_mlp.add(rows(taps[0].mlp), rows(taps[1].mlp))
    if pa.d_model == pb.d_model:
        for l, j in enumerate(acc.pair):
            ha, hb = taps[0].out[l][keep].double(), taps[1].out[j][keep].double()
            acc.drift_sum[l] += ((ha - hb).norm(dim=-1) / hb.norm(dim=-1).clamp_min(1e-300)).sum().item()
    acc.n += int(flat.sum())
    la, lb = F.log_softmax(logits_a[:, :-1].double(), -1), F.log_softmax(logits_b[:, :-1].double(), -1)
    has_target = keep[:, :-1] & mask[:, 1:].bool()
    targets = ids[:, 1:][has_target]
    kl = (la.exp() * (la - lb)).sum(-1)[has_target].clamp_min(0.0)  # >= 0 up to rounding
    dnll = (lb - la).gather(-1, ids[:, 1:, None]).squeeze(-1)[has_target]  # NLL_A - NLL_B
    pos = torch.arange(ids.shape[1] - 1).expand_as(has_target)[has_target]
    acc.tokens.add(kl.cpu(), dnll.cpu(), pos.cpu(), targets.cpu())


def _refuse_non_finite(pm: ProbeModel, taps: _Taps, logits: torch.Tensor, real: torch.Tensor) -> None:
    """The shared guard (capture/finite.py) on what one model wrote this batch at its real (not padding)
    tokens, before any sum takes it."""
    pieces = [(l, piece, x) for l in range(pm.n_layers)
              for piece, x in (("mlp_out", taps.mlp[l]), ("resid_post", taps.out[l]))]
    refuse_non_finite(((l, p, x[real] if x is not None else None) for l, p, x in
                       [*pieces, (None, "logits", logits)]), model=pm.name)


def _result(pa: ProbeModel, pb: ProbeModel, acc: _Acc, opts: DiffOptions, seconds: float) -> DiffResult:
    cka = acc.cka.value().numpy()
    drift = [float(x / acc.n) if pa.d_model == pb.d_model else float("nan") for x in acc.drift_sum]
    rows = acc.tokens.rows()
    n_pred = sum(r["n"] for r in rows if r["bucket_kind"] == "position")
    kl_mean = sum(r["kl_mean"] * r["n"] for r in rows if r["bucket_kind"] == "position") / max(n_pred, 1)
    dnll = sum(r["dnll_mean"] * r["n"] for r in rows if r["bucket_kind"] == "position") / max(n_pred, 1)
    summary = {
        "model_a": pa.name, "model_b": pb.name, "n_layers": [pa.n_layers, pb.n_layers],
        "d_model": [pa.d_model, pb.d_model], "d_ff": [list(pa.d_ff), list(pb.d_ff)],
        "cka": _matrix(cka),
        "cka_mlp": None if acc.cka_mlp is None else _matrix(acc.cka_mlp.value().numpy()),
        "best_match": [int(np.nanargmax(row)) if np.isfinite(row).any() else None for row in cka],
        "drift": [_num(v) for v in drift], "drift_pairing": acc.pairing, "drift_layers_b": acc.pair,
        "kl_mean": kl_mean, "dnll_mean": dnll, "n_tokens": acc.n, "n_predictions": n_pred,
        "buckets": rows, "options": opts.__dict__, "seconds": seconds, "world_size": world(),
        "paths": [str(pa.path) if pa.path else None, str(pb.path) if pb.path else None],
    }
    if acc.stats is not None:
        summary["stats"] = [{k: _num(v) if isinstance(v, float) else v for k, v in r.items()}
                            for r in acc.stats.rows()]
        summary["stats_ci"] = CI_OVER_SEQUENCES
    return DiffResult(summary, cka, drift)


def finite_json(x):
    """`x` with every non-finite float made None (JSON has no NaN: a bare NaN is not valid JSON)."""
    if isinstance(x, dict):
        return {k: finite_json(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite_json(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _matrix(m: np.ndarray) -> list[list[float | None]]:
    return [[_num(v) for v in row] for row in m]


def _num(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def tables(res: DiffResult) -> dict[str, list[dict]]:
    """The tidy CSVs: cka.csv (layer x layer matrix rows), layers.csv (per layer of A), tokens.csv."""
    s = res.summary
    name = f"{s['model_a']} vs {s['model_b']}"
    cka = [{"model": name, "layer_i": i, "layer_j": j, "statistic": stat, "value": v}
           for stat, key in (("cka_resid", "cka"), ("cka_mlp", "cka_mlp"))
           for i, row in enumerate(s[key] or []) for j, v in enumerate(row)]
    n_a = s["n_layers"][0]
    layers = []
    for l in range(n_a):
        depth = l / max(n_a - 1, 1)
        finite = [x for x in s["cka"][l] if x is not None]
        best = max(finite) if finite else None
        ci = {"drift_resid": (s.get("drift_ci") or {}), "cka_best": (s.get("cka_best") or {})}
        for stat, value in (("drift_resid", s["drift"][l]), ("cka_best", best),
                            ("best_match_layer", s["best_match"][l])):
            over_seeds = ci.get(stat, [])[l] if ci.get(stat) else {}  # `tlm diff CMP --arm`: CIs over seeds
            layers.append({"model": name, "layer": l, "depth": depth, "statistic": stat, "value": value,
                           "ci_low": over_seeds.get("ci_low"), "ci_high": over_seeds.get("ci_high"),
                           "n_tokens": s["n_tokens"], "d_ff": s["d_ff"][0][l]})
    tokens = [{"model": name, **r} for r in s["buckets"]]
    out = {"cka.csv": cka, "layers.csv": layers, "tokens.csv": tokens}
    if s.get("stats"):
        out["stats.csv"] = [{"model_a": s["model_a"], "model_b": s["model_b"],
                             **{k: r[k] for k in STATS_COLUMNS}} for r in s["stats"]]
    return out


STATS_COLUMNS = ("layer", "depth", "statistic", "value_a", "value_b", "diff", "ci_low", "ci_high", "n")
"""stats.csv's columns after model_a, model_b (n: sequences for one pair, seeds over a comparison)."""


def write_diff(out: Path, res: DiffResult) -> None:
    """diff.json and the tidy CSVs into `out`, all-or-nothing (a temporary folder published at the end)."""
    import json

    import pandas as pd

    from tlm_probe.files.fileio import publish, temp_folder

    with temp_folder(out) as tmp:
        (tmp / "diff.json").write_text(json.dumps(finite_json(res.summary), indent=1, default=str,
                                                  allow_nan=False) + "\n")
        for name, rows in tables(res).items():
            pd.DataFrame(rows).to_csv(tmp / name, index=False)
        publish(tmp, out, "diff")
