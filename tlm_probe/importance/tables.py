"""Turn the importance pass's accumulators into the contract's tidy rows (per layer, and layer x layer).

Matrix indices r = 0..L: r = l is the residual stream entering block l (0 = embeddings), r = L the output
of the last block. `drop_block_best[_last]` rows are (layer_i = l*, layer_j = l* + n, value = angular
distance): for each block size n, the n consecutive blocks whose removal changes the stream least
(Gromov et al. 2024; `_last` uses the last token only, as in the paper).
Each family of rows is computed only when one of its statistics was asked; one that cannot be computed on
this input (too few tokens for a probe, ...) becomes a one-line reason instead of a crash.
"""

from __future__ import annotations

import math

import numpy as np

from tlm_probe.importance.geometry import (
    best_blocks_to_drop,
    cka_matrix,
    effective_rank,
    participation_ratio,
)
from tlm_probe.importance.linear_probes import PROBE_MODEL, majority_baseline, probe_accuracy, top_k_filter
from tlm_probe.importance.utilisation import stable_rank, weight_matrix
from tlm_probe.registry import import_entry
from tlm_probe.statistic_names import STATISTICS

MATRIX_INDEX = "r = l: residual stream entering block l (r = 0: embeddings); r = L: output of the last block"
NAN = math.nan


def _plain(value: float, n: int) -> dict:
    return dict(value=float(value), ci_low=NAN, ci_high=NAN, std=NAN, n_tokens=int(n))


def sample_rows(pm, opts, first) -> dict[str, list[dict]]:
    reps, n = first.sample.reps or [], first.sample.n
    layers = range(1, len(reps))  # layer l reads r = l + 1 (its output)
    return {
        "effective_rank": [_plain(effective_rank(reps[r]), n) for r in layers],
        "participation_ratio": [_plain(participation_ratio(reps[r]), n) for r in layers],
    }


def anisotropy_rows(pm, opts, first) -> dict[str, list[dict]]:
    aniso = first.anisotropy.values()
    return {"anisotropy": [_plain(aniso[r], first.anisotropy.count) for r in range(1, len(aniso))]}


def _probe_labels(first, opts) -> tuple[np.ndarray, str]:
    y = first.sample.labels.numpy()
    if opts.probe_labels is not None:
        return y, "user labels"
    k = opts.probe_top_k
    return top_k_filter(y, first.label_counts.numpy(), k), f"next token among the top {k}"


def probe_rows(pm, opts, first) -> dict[str, list[dict]]:
    y, how = _probe_labels(first, opts)
    keep = y >= 0
    reps = first.sample.reps or []
    groups = first.sample.groups.numpy()[keep]
    rows = [
        probe_accuracy(reps[r].numpy()[keep], y[keep], seed=opts.seed, groups=groups)
        for r in range(1, len(reps))
    ]
    first.probe_info = dict(
        labels=how,
        model=PROBE_MODEL,
        n_labelled=int(keep.sum()),
        majority_baseline=majority_baseline(y[keep]),
    )
    return {"probe_acc": rows}


def neuron_rows(pm, opts, first) -> dict[str, list[dict]]:
    return {
        "dead_neuron_frac": [_plain(a.dead_fraction(opts.freq_threshold), a.count) for a in first.neurons]
    }


def stable_rank_rows(pm, opts, first) -> dict[str, list[dict]]:
    return {
        "stable_rank_mlp_out": [
            _plain(stable_rank(weight_matrix(pm.mlp_down(l))), 0) for l in range(pm.n_layers)
        ]
    }


def _matrix_rows(model: str, name: str, m: np.ndarray) -> list[dict]:
    R = m.shape[0]
    return [
        dict(model=model, layer_i=i, layer_j=j, statistic=name, value=float(m[i, j]))
        for i in range(R)
        for j in range(R)
    ]


def _matrices(pm, first, wanted: set[str]) -> list[dict]:
    if first is None:
        return []
    out = []
    mats = {}
    for name, acc in (("angular_distance", first.angular), ("angular_distance_last", first.angular_last)):
        if acc is not None:
            mats[name] = acc.matrix()
    reps = first.sample.reps or []
    if "cka_linear" in wanted and len(reps) > 1:
        mats["cka_linear"] = cka_matrix(reps)
    for name, m in mats.items():
        out += _matrix_rows(pm.name, name, m)
    for name, suffix in (("angular_distance", ""), ("angular_distance_last", "_last")):
        for start, n, dist in best_blocks_to_drop(mats[name]) if name in mats else []:
            row = dict(layer_i=start, layer_j=start + n, statistic=f"drop_block_best{suffix}", value=dist)
            out.append(dict(model=pm.name, **row))
    return out


def _per_layer(pm, stats: dict[str, list[dict]]) -> list[dict]:
    L = pm.n_layers
    rows = []
    for name, per_layer in stats.items():
        for l, r in enumerate(per_layer):
            depth = l / (L - 1) if L > 1 else 0.0
            rows.append(dict(model=pm.name, layer=l, depth=depth, statistic=name, **r, d_ff=pm.d_ff[l]))
    return rows


def _first_line(e: Exception) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"


def _info(opts, first, effects, grads, skipped: dict) -> dict:
    info = dict(
        seed=opts.seed,
        act_threshold=opts.act_threshold,
        freq_threshold=opts.freq_threshold,
        matrix_index=MATRIX_INDEX,
        skipped=skipped,
    )
    if first is not None:
        info.update(sample_tokens=first.sample.n, sample_seen=first.sample.seen)
        if getattr(first, "probe_info", None):
            info["probe"] = first.probe_info
    if effects is not None:
        info.update(
            ablation_metric=effects.metric_name, ablations=list(opts.ablations), resample_pool=opts.pool_size
        )
    if grads is not None:
        info.update(grad_sequences=grads.sequences, grad_tokens=grads.tokens)
    return info


def _computed(wanted: set[str]) -> dict[str, list[str]]:
    """compute function (STATISTICS rows' `compute`) -> the statistics it makes, in the rows' order."""
    paths = dict.fromkeys(STATISTICS.get(s).compute for s in STATISTICS if STATISTICS.get(s).compute)
    out = {path: STATISTICS.where(lambda row, p=path: row.compute == p) for path in paths}
    return {path: names for path, names in out.items() if wanted & set(names)}


def finish_tables(pm, opts, wanted: set[str], first, effects, grads):
    """(per-layer rows, matrix rows, info) of the `wanted` statistics from the passes that ran."""
    stats: dict[str, list[dict]] = {}
    skipped: dict[str, str] = {}
    if first is not None and first.lens is not None:
        stats.update(first.lens.rows())
    if effects is not None:
        stats.update(effects.rows())
    if grads is not None:
        stats.update(grads.rows())
    for path, names in _computed(wanted).items():  # a function that makes several rows runs once
        try:
            stats.update(import_entry(path)(pm, opts, first))
        except (ValueError, ArithmeticError, RuntimeError) as e:  # e.g. too few tokens for a probe
            skipped.update({n: f"cannot be computed on this input ({_first_line(e)})" for n in names})
    info = _info(opts, first, effects, grads, skipped)
    rows = [r for r in _per_layer(pm, stats) if r["statistic"] in wanted]
    return rows, [m for m in _matrices(pm, first, wanted) if m["statistic"] in wanted], info
