"""`tlm trust`: probe one model on every corpus (the probe's own engine), then judge each statistic's
per-layer ranking (trust/agreement.py) against the corpora, the ablation target and the task target
(trust/task_target.py). Files: trust.csv (one row per statistic), values.csv (every corpus x layer x
statistic value), halves.csv (the same on each corpus's two disjoint halves), task_target.csv, trust.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tlm_probe.errors import UserError
from tlm_probe.probe.engine import run_probe
from tlm_probe.probe.options import ProbeOptions
from tlm_probe.trust.agreement import judge
from tlm_probe.trust.halves import check_halves, check_halves_read
from tlm_probe.trust.options import TrustOptions, eval_options, wanted
from tlm_probe.trust.task_target import task_target

HALF_COLUMNS = ["corpus", "half", "layer", "statistic", "value"]


@dataclass
class TrustResult:
    table: pd.DataFrame
    """trust.csv: statistic, kendall_w, min_pairwise_spearman, spearman_with_target, spearman_with_task,
    flags."""
    values: pd.DataFrame
    """values.csv: corpus, layer, statistic, value."""
    summary: dict
    halves: pd.DataFrame | None = None
    """halves.csv: corpus, half (a | b: every other sequence), layer, statistic, value."""
    task: pd.DataFrame | None = None
    """task_target.csv (trust/task_target.py TASK_COLUMNS)."""


def _probe_options(opts: TrustOptions, corpus: str, half: str) -> ProbeOptions:
    return ProbeOptions(data=corpus, stats=opts.stats, split=opts.split, max_tokens=opts.max_tokens,
                        seq_len=opts.seq_len, batch_size=opts.batch_size, device=opts.device, half=half)


def _probe(model, opts: TrustOptions, corpus: str, half: str, progress: bool, load: dict):
    return run_probe(model, _probe_options(opts, corpus, half), progress=progress, **load)


def _values(res, corpus: str) -> pd.DataFrame:
    return res.table[["layer", "statistic", "value"]].assign(corpus=corpus)  # per layer only


def _wide(values: pd.DataFrame, corpora: list[str], n_layers: int) -> dict[str, np.ndarray]:
    """statistic -> (corpora, layers 0..L-1) values (NaN where a layer has none: an absent MLP)."""
    table = {}
    for name, rows in values.groupby("statistic", sort=False):
        wide = rows.pivot_table(index="corpus", columns="layer", values="value")
        table[name] = wide.reindex(index=corpora, columns=range(n_layers)).to_numpy(dtype=float)
    return table


def _model_record(prov: dict, n_tokens: dict) -> dict:
    """What tlm schedule --from-probe reads of the probed model (as from a probe's provenance)."""
    arch = prov.get("architecture") or {}
    return {"model": prov.get("model"), "content_hash": prov.get("content_hash"),
            "architecture": {k: arch.get(k) for k in ("d_model", "vocab_size", "n_layers", "d_ff")},
            "n_tokens": n_tokens}


def run_trust(model, opts: TrustOptions, progress: bool = False, **load) -> TrustResult:
    """Load the model once, probe it on each corpus (and each corpus's two halves), score the task target,
    judge the rankings."""
    from tlm_probe.capture import ProbeModel, load_probe_model
    from tlm_probe.models.device import resolve_device_name

    eval_opts = eval_options(opts) if wanted(opts.task) else None  # a bad task: refused before any probe
    if not isinstance(model, ProbeModel):
        if opts.halves:  # before the model loads (the CLI checked already: cheap, header reads)
            check_halves(model, opts.data, opts.seq_len, opts.max_tokens)
        model = load_probe_model(model, resolve_device_name(opts.device), "float32", **load)
        load = {}
    if opts.halves:  # text corpora too, with the model's tokenizer: before any corpus is probed
        check_halves_read(model, opts.data, _probe_options(opts, opts.data[0], ""))
    frames, halves, provs = [], [], {}
    for corpus in opts.data:
        res = _probe(model, opts, corpus, "", progress, load)
        frames.append(_values(res, corpus))
        provs[corpus] = res.provenance
        for half in "ab" if opts.halves else "":
            probed = _probe(model, opts, corpus, half, progress, load)
            halves.append(_values(probed, corpus).assign(half=half))
    values = pd.concat(frames, ignore_index=True)[["corpus", "layer", "statistic", "value"]]
    n_layers = int(values["layer"].max()) + 1
    table = _wide(values, list(opts.data), n_layers)
    if opts.target not in table:
        raise UserError(f"the probe gave no {opts.target} rows: it cannot be the target for this model")
    task = task_target(model, opts, eval_opts, progress) if eval_opts else None
    judged = pd.DataFrame(judge(table, opts.target, opts.min_w, opts.min_spearman,
                                (task.name, task.drop) if task else None))
    n_tokens = {c: (p.get("data") or {}).get("n_tokens") for c, p in provs.items()}
    record = _model_record(provs[opts.data[0]], n_tokens)
    summary = {"corpora": list(opts.data), "target": opts.target, "min_w": opts.min_w,
               "min_spearman": opts.min_spearman, "n_layers": n_layers, **record, "halves": opts.halves,
               "task_target": task.summary if task else None,
               "statistics": judged.replace({np.nan: None}).to_dict("records")}
    half_table = pd.concat(halves, ignore_index=True)[HALF_COLUMNS] if halves else None
    return TrustResult(judged, values, summary, half_table, task.table if task else None)


def write_trust(out: Path, res: TrustResult) -> None:
    from tlm_probe.files.fileio import publish, temp_folder

    with temp_folder(out) as tmp:
        res.table.to_csv(tmp / "trust.csv", index=False)
        res.values.to_csv(tmp / "values.csv", index=False)
        for name, frame in (("halves.csv", res.halves), ("task_target.csv", res.task)):
            if frame is not None:
                frame.to_csv(tmp / name, index=False)
        (tmp / "trust.json").write_text(json.dumps(res.summary, indent=1, default=str) + "\n")
        publish(tmp, out, "trust")
