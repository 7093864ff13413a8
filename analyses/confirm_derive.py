"""The confirmatory study's probe-derived arm, derived honestly (issue 31, part 3; PREREGISTRATION.md).

Source: a uniform model of a seed outside the study (confirm.SOURCE), trained exactly like the arms.
Probe tokens: two disjoint halves of windows drawn from the TRAINING split (a fixed permutation of its
128-token windows, seed HALF_SEED), never the validation or test split. For each candidate rule, in the
pre-registered order, a schedule is derived from each half; the first candidate whose two schedules agree
within one rounding unit (multiple_of) at every layer is chosen, and its schedule derived from both halves
together is frozen as results/confirm/probe-derived.json. If none is stable, the most stable one is used
and derivation.json says so. derivation.json records every candidate's widths and the largest difference.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HALF_SEED = 31
SEQ = 128
CANDIDATES = (
    {"statistic": "ablation_dnll_mlp_zero", "power": "1", "min": "0.25", "max": "2.0", "rows": 512},
    {"statistic": "ablation_dnll_mlp_zero", "power": "1", "min": "0.25", "max": "2.0", "rows": 2048},
    {"statistic": "ablation_dnll_mlp_zero", "power": "0.5", "min": "0.5", "max": "1.5", "rows": 2048},
)
"""In order: the allocation study's rule on 65,536 tokens per half; the same on 4x the tokens; a gentler
rule (square root, widths within 0.5-1.5x) on 4x the tokens."""


def halves(data: Path, rows: int, out: Path) -> tuple[Path, Path, Path]:
    """Two disjoint sets of `rows` training windows each (and their union) as 2-D .npy token files."""
    from tlm_probe.data.stream import load_token_data

    ids = load_token_data(str(data)).train
    n_windows = (len(ids) - 1) // SEQ
    pick = np.random.default_rng(HALF_SEED).permutation(n_windows)[: 2 * rows]
    arr = np.stack([np.asarray(ids[w * SEQ: (w + 1) * SEQ], dtype=np.int64) for w in pick])
    paths = tuple(out / f"train-{name}-{rows}.npy" for name in ("a", "b", "ab"))
    for path, part in zip(paths, (arr[:rows], arr[rows:], arr), strict=True):
        if not path.is_file():
            np.save(path, part.astype(np.uint32))
    return paths


def schedule_for(tokens: Path, cand: dict, run: Path, out: Path, tlm, model: list[str]) -> dict:
    """Probe `run` on `tokens`, derive a schedule with the candidate's rule; the schedule file's dict."""
    probe = out / f"probe-{tokens.stem}"
    if not (probe / "results.csv").is_file():
        tlm("probe", str(run), "--data", str(tokens), "--max-tokens", "0", "--threads", "1",
            "--stats", cand["statistic"], "--out", str(probe))
    tag = f"{tokens.stem}-p{cand['power']}-{cand['min']}-{cand['max']}"
    path = out / f"schedule-{tag}.json"
    if not path.is_file():
        d_ff, mult = model[model.index("--d-ff") + 1], model[model.index("--multiple-of") + 1]
        tlm("schedule", "--from-probe", str(probe), "--statistic", cand["statistic"], "--rule", "x",
            "--power", cand["power"], "--min-ratio", cand["min"], "--max-ratio", cand["max"],
            "--layers", model[model.index("--layers") + 1], "--d-ff", d_ff, "--multiple-of", mult,
            "--out", str(path))
    return json.loads(path.read_text())


def derive(opts, run: Path, data: Path, tlm, model: list[str], derived: str) -> Path:
    """Write results/<derived> and derivation.json from the source `run` (trained with `model` flags);
    returns the schedule's path."""
    out = opts.root / "derive"
    out.mkdir(parents=True, exist_ok=True)
    record = []
    for cand in CANDIDATES:
        a, b, ab = halves(data, cand["rows"], out)
        sa, sb, sab = (schedule_for(p, cand, run, out, tlm, model) for p in (a, b, ab))
        units = max(abs(x - y) for x, y in zip(sa["widths"], sb["widths"], strict=True)) / sa["multiple_of"]
        record.append({**cand, "widths_half_a": sa["widths"], "widths_half_b": sb["widths"],
                       "widths_both": sab["widths"], "values_both": sab["source"]["values"],
                       "max_diff_units": units, "stable": units <= 1, "schedule": sab})
        if units <= 1:
            break
    chosen = min(record, key=lambda r: r["max_diff_units"]) if not record[-1]["stable"] else record[-1]
    (opts.results / derived).write_text(json.dumps(chosen["schedule"], indent=2) + "\n")
    summary = {"source_run": run.name, "half_seed": HALF_SEED, "seq_len": SEQ, "split": "train",
               "chosen": {k: v for k, v in chosen.items() if k != "schedule"},
               "all_stable": chosen["stable"],
               "candidates": [{k: v for k, v in r.items() if k != "schedule"} for r in record]}
    (opts.results / "derivation.json").write_text(json.dumps(summary, indent=2) + "\n")
    return opts.results / derived
