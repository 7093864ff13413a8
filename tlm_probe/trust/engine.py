"""`tlm trust`: probe one model on every corpus (the probe's own engine), then judge each statistic's
per-layer ranking (trust/agreement.py). Files: trust.csv (one row per statistic), values.csv (every
corpus x layer x statistic value), trust.json."""

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
from tlm_probe.trust.options import TrustOptions


@dataclass
class TrustResult:
    table: pd.DataFrame
    """trust.csv: statistic, kendall_w, min_pairwise_spearman, spearman_with_target, flags."""
    values: pd.DataFrame
    """values.csv: corpus, layer, statistic, value."""
    summary: dict


def run_trust(model, opts: TrustOptions, progress: bool = False, **load) -> TrustResult:
    """Load the model once, probe it on each corpus, judge the rankings."""
    from tlm_probe.capture import ProbeModel, load_probe_model
    from tlm_probe.models.device import resolve_device_name

    if not isinstance(model, ProbeModel):
        model = load_probe_model(model, resolve_device_name(opts.device), "float32", **load)
        load = {}
    frames = []
    for corpus in opts.data:
        probe_opts = ProbeOptions(data=corpus, stats=opts.stats, split=opts.split, max_tokens=opts.max_tokens,
                                  seq_len=opts.seq_len, batch_size=opts.batch_size, device=opts.device)
        res = run_probe(model, probe_opts, progress=progress, **load)
        rows = res.table[res.table["layer"] >= 0][["layer", "statistic", "value"]]
        frames.append(rows.assign(corpus=corpus))
    values = pd.concat(frames, ignore_index=True)[["corpus", "layer", "statistic", "value"]]
    table = {}
    for name, rows in values.groupby("statistic", sort=False):
        wide = rows.pivot_table(index="corpus", columns="layer", values="value").reindex(list(opts.data))
        table[name] = wide.to_numpy(dtype=float)
    if opts.target not in table:
        raise UserError(f"the probe gave no {opts.target} rows: it cannot be the target for this model")
    judged = pd.DataFrame(judge(table, opts.target, opts.min_w, opts.min_spearman))
    summary = {"corpora": list(opts.data), "target": opts.target, "min_w": opts.min_w,
               "min_spearman": opts.min_spearman, "n_layers": int(values["layer"].max()) + 1,
               "statistics": judged.replace({np.nan: None}).to_dict("records")}
    return TrustResult(judged, values, summary)


def write_trust(out: Path, res: TrustResult) -> None:
    from tlm_probe.files.fileio import publish, temp_folder

    with temp_folder(out) as tmp:
        res.table.to_csv(tmp / "trust.csv", index=False)
        res.values.to_csv(tmp / "values.csv", index=False)
        (tmp / "trust.json").write_text(json.dumps(res.summary, indent=1, default=str) + "\n")
        publish(tmp, out, "trust")
