"""Comparative training: every arm (width schedule) x seed on the same tokens, budget and seeds.

Same data: the corpus is tokenized once and handed to every run; the batch order depends only on the data
and the seed (data.stream.BatchOrder), so arm A and arm B with seed s see identical batches. Same budget:
parameters and training FLOPs per token are checked equal across arms before anything trains.
Crash safety: each finished run leaves run.json; the tables are rewritten atomically after every run, and
re-running the same comparison skips finished runs and resumes unfinished ones from their checkpoints.
"""

from __future__ import annotations

import json
import math
import platform
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from tlm_probe.accounting import count_params, train_flops_per_token
from tlm_probe.data.stream import TokenData, load_token_data
from tlm_probe.errors import UserError
from tlm_probe.models.io import atomic_write_text
from tlm_probe.train import distributed as dist
from tlm_probe.train.checkpoint import step_folders
from tlm_probe.train.config import TrainConfig
from tlm_probe.train.loop import resolve_device
from tlm_probe.train.run import check_replaceable, ensure_writable

SETTINGS = "compare_settings.json"
# options that vary per run (schedule, seed) or only say how a machine runs it: not part of the settings
# that must match when an interrupted comparison is continued
PER_RUN_OR_MACHINE = ("schedule", "seed", "progress", "device", "threads")
RESULT_COLUMNS = [
    "arm",
    "schedule",
    "seed",
    "val_loss",
    "val_ppl",
    "val_bpb",
    "params",
    "flops_per_token",
    "tokens",
    "tokens_per_s",
    "d_ff",
]
METRICS = ("val_loss", "val_ppl", "val_bpb")
EXTRA = "extra_columns"
"""Row key holding the {column: value} an after_run hook returned for that run."""


def parse_list(text: str, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UserError(f"--{what} is empty")
    if len(set(items)) != len(items):
        raise UserError(f"--{what} lists an item twice: {text}")
    return items


def parse_seeds(text: str) -> list[int]:
    items = parse_list(text, "seeds")
    if not all(s.lstrip("-").isdigit() for s in items):
        raise UserError(f"--seeds must be integers separated by commas, got {text!r}")
    return [int(s) for s in items]


def run_name(arm: str, seed: int) -> str:
    return f"{arm}-s{seed}"


def check_budget(base: TrainConfig, arms: list[str], vocab_size: int) -> dict[str, dict]:
    """Parameters and FLOPs per token of each arm; a UserError unless all are equal."""
    budget = {}
    for arm in arms:
        cfg = base.replace(schedule=arm).model_config(vocab_size)
        budget[arm] = {
            "params": count_params(cfg).total,
            "flops_per_token": train_flops_per_token(cfg, base.seq_len),
            "d_ff": list(cfg.d_ff),
        }
    ref = budget[arms[0]]
    for arm, b in budget.items():
        if (b["params"], b["flops_per_token"]) != (ref["params"], ref["flops_per_token"]):
            raise UserError(
                f"arm {arm!r} has {b['params']:,} params / {b['flops_per_token']:,} FLOPs per token, "
                f"{arms[0]!r} has {ref['params']:,} / {ref['flops_per_token']:,}: not a fair comparison"
            )
    return budget


def check_settings(out: Path, settings: dict, overwrite: bool) -> None:
    """A folder from an earlier, different comparison is refused (unless --overwrite)."""
    path = out / SETTINGS
    ensure_writable(out)
    if overwrite:
        check_replaceable(out, (SETTINGS, "compare.json"), "a comparison")
        return
    if not out.exists():
        return
    if not path.is_file():
        if any(out.iterdir()):
            raise UserError(
                f"output folder {out} exists and is not a comparison; pass --overwrite to replace it"
            )
        return
    old = json.loads(path.read_text())
    if old != settings:
        changed = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
        raise UserError(
            f"{out} holds a different comparison (changed: {', '.join(changed)}); "
            "pass --overwrite to replace it"
        )


def paired_table(results: pd.DataFrame, baseline: str, metrics: tuple[str, ...] = METRICS) -> pd.DataFrame:
    """Each arm minus the baseline, paired by seed, with scipy's paired t-test on each metric."""
    rows = []
    base = results[results["arm"] == baseline].set_index("seed")
    for arm in dict.fromkeys(results["arm"]):
        if arm == baseline:
            continue
        mine = results[results["arm"] == arm].set_index("seed")
        seeds = sorted(set(mine.index) & set(base.index))
        row = {"arm": arm, "baseline": baseline, "n_pairs": len(seeds)}
        for m in metrics:
            row.update(_paired(mine.loc[seeds, m].to_numpy(float), base.loc[seeds, m].to_numpy(float), m))
        rows.append(row)
    return pd.DataFrame(rows)


def _paired(a: np.ndarray, b: np.ndarray, metric: str) -> dict:
    diff = a - b
    ok = len(diff) >= 2 and not np.isnan(diff).any() and np.ptp(diff) > 0
    t, p = stats.ttest_rel(a, b) if ok else (math.nan, math.nan)
    std = float(np.std(diff, ddof=1)) if len(diff) >= 2 else math.nan
    return {
        f"{metric}_diff_mean": float(np.mean(diff)) if len(diff) else math.nan,
        f"{metric}_diff_std": std,
        f"{metric}_t": float(t),
        f"{metric}_p": float(p),
    }


def summary_table(results: pd.DataFrame, metrics: tuple[str, ...] = METRICS) -> pd.DataFrame:
    g = results.groupby("arm", sort=False)
    out = g.agg(
        schedule=("schedule", "first"),
        n_seeds=("seed", "nunique"),
        params=("params", "first"),
        flops_per_token=("flops_per_token", "first"),
        tokens_per_s_mean=("tokens_per_s", "mean"),
    )
    for m in metrics:
        out[f"{m}_mean"] = g[m].mean()
        out[f"{m}_std"] = g[m].std(ddof=1)
    return out.reset_index()


def write_tables(out: Path, rows: list[dict], settings: dict, budget: dict, baseline: str) -> None:
    results = pd.DataFrame(rows, columns=RESULT_COLUMNS)
    results["d_ff"] = results["d_ff"].map(lambda w: " ".join(map(str, w)))
    # columns an after_run hook added (tlm compare --eval-tasks: "task:metric"), compared like val_loss
    extra = list(dict.fromkeys(k for r in rows for k in r.get(EXTRA, {})))
    for k in extra:
        results[k] = [r.get(EXTRA, {}).get(k, math.nan) for r in rows]
    metrics = METRICS + tuple(extra)
    summary = summary_table(results, metrics)
    has_base = (results["arm"] == baseline).any()
    paired = paired_table(results, baseline, metrics) if has_base else pd.DataFrame()
    for name, table in (("results", results), ("summary", summary), ("paired", paired)):
        atomic_write_text(out / f"{name}.csv", table.to_csv(index=False))
    doc = {
        "settings": settings,
        "budget": budget,
        "baseline": baseline,
        "provenance": _provenance(),
        "results": _records(results),
        "summary": _records(summary),
        "paired": _records(paired),
    }
    atomic_write_text(out / "compare.json", json.dumps(doc, indent=2, default=str) + "\n")


def _records(df: pd.DataFrame) -> list[dict]:
    return json.loads(df.to_json(orient="records")) if len(df) else []


def _provenance() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    import torch

    try:
        own = version("tlm_probe")
    except PackageNotFoundError:  # running from a source tree that is not installed
        own = None
    return {
        "tlm_probe": own,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def compare(
    base: TrainConfig,
    arms: list[str],
    seeds: list[int],
    out: str | Path,
    *,
    overwrite: bool = False,
    data: TokenData | None = None,
    train_fn: Callable | None = None,
    after_run: Callable[[Path], dict] | None = None,
) -> dict:
    """Train every arm x seed into OUT/runs/<arm>-s<seed>/ and write the tables; returns compare.json.

    after_run(run folder) -> {column: number}, on rank 0 after each run (also for runs finished in an
    earlier invocation): extra per-run columns, summarised and paired-tested like the validation loss."""
    out = Path(out)
    for arm in arms:  # cheap checks before the corpus is tokenized
        base.replace(schedule=arm)
    data = data if data is not None else load_token_data(base.data, base.tokenizer)
    settings = {
        "arms": arms,
        "seeds": seeds,
        "base": {k: v for k, v in base.to_dict().items() if k not in PER_RUN_OR_MACHINE},
    }
    budget = check_budget(base, arms, data.vocab_size)
    check_settings(out, settings, overwrite)
    baseline = "uniform" if "uniform" in arms else arms[0]
    # under torchrun every rank runs every arm together (DDP/FSDP inside each run); rank 0 writes
    dist.init(resolve_device(base.device).type)
    if dist.is_main():
        if overwrite and out.exists():
            shutil.rmtree(out)
        (out / "runs").mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / SETTINGS, json.dumps(settings, indent=2) + "\n")
    rows = []
    for seed in seeds:
        for arm in arms:
            dist.barrier()
            summary = _run_arm(base, arm, seed, out, data, train_fn)
            rows.append({**summary, "arm": arm, "schedule": arm, "seed": seed, **budget[arm]})
            if after_run is not None and dist.is_main():
                rows[-1][EXTRA] = after_run(out / "runs" / run_name(arm, seed))
            if dist.is_main():
                write_tables(out, rows, settings, budget, baseline)
    dist.barrier()
    return json.loads((out / "compare.json").read_text())


def _run_arm(base: TrainConfig, arm: str, seed: int, out: Path, data: TokenData, train_fn) -> dict:
    run = out / "runs" / run_name(arm, seed)
    done = run / "run.json"
    if done.is_file():  # finished in an earlier invocation
        return json.loads(done.read_text())
    if dist.is_main() and run.is_dir() and not step_folders(run):  # died before its first checkpoint
        shutil.rmtree(run)
    dist.barrier()
    tc = base.replace(schedule=arm, seed=seed)
    summary = (train_fn or train_quietly)(tc, run, data=data, resume=True, description=run_name(arm, seed))
    if summary.get("interrupted"):
        raise KeyboardInterrupt  # Ctrl-C inside a run: its checkpoint is saved; stop the whole comparison
    return summary


def train_quietly(
    tc: TrainConfig, run: Path, *, data: TokenData, resume: bool, description: str = ""
) -> dict:
    """Library default for compare(): train without a progress bar (the CLI passes one that draws it)."""
    from tlm_probe.train.loop import Trainer
    from tlm_probe.train.run import plan_run

    plan = plan_run(tc.replace(progress=False), run, data=data, resume=resume)
    return Trainer(plan).run()
