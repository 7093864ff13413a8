"""`tlm diff COMPARE --arm ARM --baseline uniform`: every seed pair of a comparison diffed, and each number
(KL, ΔNLL, the CKA matrices, drift, the best CKA per layer, the frequency buckets) given as its mean over
seeds with a 95% t interval — the seeds are the unit of replication, as in `tlm compare`'s paired table.

The per-seed diffs are the ordinary ones (engine.run_diff on the arm's and the baseline's run of one seed);
diff.json keeps each of them under `per_seed`, so the aggregate can be recomputed from the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy import stats

from tlm_probe.diff.engine import DiffResult
from tlm_probe.diff.paired_stats import CI_OVER_SEEDS
from tlm_probe.errors import UserError


def seed_pairs(compare: Path, arm: str, baseline: str) -> list[tuple[int, Path, Path]]:
    """(seed, arm's run, baseline's run) for every seed whose two runs have finished (model.safetensors)."""
    runs = compare / "runs"
    if not runs.is_dir():
        raise UserError(f"{compare} is not a comparison folder (no runs/); give two models or a `tlm compare "
                        "--out` folder with --arm")
    if arm == baseline:
        raise UserError(f"--arm and --baseline are both {arm!r}: a model against itself needs no seeds")
    found = {}
    for run in runs.glob(f"{arm}-s*"):
        seed = run.name.removeprefix(f"{arm}-s")
        other = runs / f"{baseline}-s{seed}"
        done = (run / "model.safetensors").is_file() and (other / "model.safetensors").is_file()
        if seed.isdigit() and done:
            found[int(seed)] = (run, other)
    if not found:
        arms = sorted({p.name.rsplit("-s", 1)[0] for p in runs.iterdir() if "-s" in p.name})
        raise UserError(f"{compare} has no finished seed of both {arm!r} and {baseline!r}; its arms: "
                        f"{', '.join(arms) or 'none'}")
    return [(seed, *found[seed]) for seed in sorted(found)]


def mean_ci(values) -> dict:
    """Mean over seeds and its 95% t interval (None for one seed: no interval, not evidence)."""
    v = np.asarray([x for x in values if x is not None], dtype=float)
    if len(v) == 0:
        return {"mean": None, "ci_low": None, "ci_high": None, "n_seeds": 0}
    if len(v) < 2 or np.all(v == v[0]):
        low = high = (None if len(v) < 2 else float(v[0]))
        return {"mean": float(v.mean()), "ci_low": low, "ci_high": high, "n_seeds": len(v)}
    low, high = stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
    return {"mean": float(v.mean()), "ci_low": float(low), "ci_high": float(high), "n_seeds": len(v)}


def _cells(matrices: list) -> list[list[dict]] | None:
    if any(m is None for m in matrices):
        return None
    return [[mean_ci([m[i][j] for m in matrices]) for j in range(len(matrices[0][0]))]
            for i in range(len(matrices[0]))]


def _buckets(results: list[DiffResult]) -> list[dict]:
    """Each position / frequency bucket: its KL and ΔNLL means over the seeds that have it, with CIs."""
    keys = [(b["bucket_kind"], b["bucket"]) for b in results[0].summary["buckets"]]
    rows = []
    for kind, bucket in keys:
        per = [b for r in results for b in r.summary["buckets"]
               if (b["bucket_kind"], b["bucket"]) == (kind, bucket)]
        row = {"bucket_kind": kind, "bucket": bucket, "n": int(sum(b["n"] for b in per)), "n_seeds": len(per)}
        for key, name in (("kl_mean", "kl"), ("dnll_mean", "dnll")):
            m = mean_ci([b[key] for b in per])
            row.update({key: m["mean"], f"{name}_ci_low": m["ci_low"], f"{name}_ci_high": m["ci_high"]})
        rows.append(row)
    return rows


def _stats(results: list[DiffResult]) -> list[dict] | None:
    """Each (statistic, layer) of --stats: value_a, value_b and diff as means over the seeds, and the diff's
    paired t interval over the seeds (each seed's A - B is one paired difference; n: seeds)."""
    if not all(r.summary.get("stats") for r in results):
        return None
    rows = []
    for k, first in enumerate(results[0].summary["stats"]):
        per = [r.summary["stats"][k] for r in results]
        d = mean_ci([p["diff"] for p in per])
        rows.append({**{key: first[key] for key in ("layer", "layer_b", "depth", "statistic")},
                     "value_a": mean_ci([p["value_a"] for p in per])["mean"],
                     "value_b": mean_ci([p["value_b"] for p in per])["mean"],
                     "diff": d["mean"], "ci_low": d["ci_low"], "ci_high": d["ci_high"], "n": d["n_seeds"],
                     "n_tokens": sum(p["n_tokens"] for p in per)})
    return rows


def aggregate(results: list[DiffResult], seeds: list[int], arm: str, baseline: str) -> DiffResult:
    """One DiffResult whose numbers are means over the seed pairs (with CIs beside them)."""
    s = [r.summary for r in results]
    cka = _cells([x["cka"] for x in s])
    mean = np.array([[c["mean"] if c["mean"] is not None else np.nan for c in row] for row in cka])
    n_layers = len(s[0]["cka"])
    best = [mean_ci([max(v for v in x["cka"][l] if v is not None) for x in s]) for l in range(n_layers)]
    summary = {
        "model_a": arm, "model_b": baseline, "seeds": seeds, "n_layers": s[0]["n_layers"],
        "d_model": s[0]["d_model"], "d_ff": s[0]["d_ff"],
        "cka": [[c["mean"] for c in row] for row in cka], "cka_ci": cka,
        "cka_mlp_ci": _cells([x["cka_mlp"] for x in s]),
        "best_match": [int(np.nanargmax(row)) for row in mean],
        "best_match_per_seed": [x["best_match"] for x in s],
        "cka_best": best, "drift": [mean_ci([x["drift"][l] for x in s])["mean"] for l in range(n_layers)],
        "drift_ci": [mean_ci([x["drift"][l] for x in s]) for l in range(n_layers)],
        "drift_pairing": s[0]["drift_pairing"], "drift_layers_b": s[0]["drift_layers_b"],
        "kl_mean": mean_ci([x["kl_mean"] for x in s])["mean"], "kl": mean_ci([x["kl_mean"] for x in s]),
        "dnll_mean": mean_ci([x["dnll_mean"] for x in s])["mean"],
        "dnll": mean_ci([x["dnll_mean"] for x in s]),
        "n_tokens": s[0]["n_tokens"], "buckets": _buckets(results), "options": s[0]["options"],
        "per_seed": [{"seed": seed, **{k: v for k, v in x.items() if k not in ("options",)}}
                     for seed, x in zip(seeds, s, strict=True)],
    }
    stats_rows = _stats(results)
    if stats_rows is not None:
        summary["stats"], summary["stats_ci"] = stats_rows, CI_OVER_SEEDS
    summary["cka_mlp"] = None if summary["cka_mlp_ci"] is None else \
        [[c["mean"] for c in row] for row in summary["cka_mlp_ci"]]
    return DiffResult(summary, mean, summary["drift"])
