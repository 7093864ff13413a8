"""Comparative training: every arm (token mixer x width schedule) x seed on the same tokens and seeds.

An arm is an `Arm(mixer, schedule)` (train/arms.py); its name (run folders `runs/<name>-s<seed>/`, the `arm`
column) is the schedule for the default mixer, attention (so attention-only comparisons read as before), and
`<mixer>-<schedule>` otherwise. `make_arms(mixers, schedules)` builds the grid, mixer-major.
Same data: the corpus is tokenized once and handed to every run; the batch order depends only on the data
and the seed (data.stream.BatchOrder), so arm A and arm B with seed s see identical batches. Same budget:
parameters and training FLOPs per token are checked equal across the schedules of each mixer before
anything trains (different mixers differ in size; the tables give each arm's counts). Paired tests are
against the uniform arm (else the first) of the same mixer.
Crash safety: each finished run leaves run.json; the tables are rewritten atomically after every run, and
re-running the same comparison skips finished runs and resumes unfinished ones from their checkpoints.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from tlm_probe.data.stream import TokenData, load_token_data
from tlm_probe.environment import machine, versions
from tlm_probe.errors import Interrupted, UserError
from tlm_probe.files.fileio import (
    MANIFEST,
    atomic_write_text,
    check_kind,
    foreign,
    read_manifest,
    record,
    remove_owned,
)
from tlm_probe.files.jsonfile import read_json_object
from tlm_probe.files.out_folder import check_apart, claim, ensure_writable
from tlm_probe.models.device import resolve_device
from tlm_probe.train import distributed as dist
from tlm_probe.train.arms import Arm, as_arms, baselines, check_budget, run_name
from tlm_probe.train.checkpoint import step_folders
from tlm_probe.train.compare_tables import COMPARED_METRICS, paired_table, summary_table
from tlm_probe.train.config import TrainConfig
from tlm_probe.train.run import check_compatible, check_device, check_resume, writer_lock

SETTINGS_FILE = "compare_settings.json"
# options that vary per run (schedule, seed) or only say how a machine runs it: not part of the settings
# that must match when an interrupted comparison is continued
PER_RUN_OR_MACHINE = ("schedule", "mixer", "seed", "progress", "device", "threads")
COMPARE_COLUMNS = ["arm", "mixer", "schedule", "seed", "val_loss", "val_ppl", "val_bpb", "params",
                   "flops_per_token", "tokens", "tokens_per_s", "d_ff", "heads", "kv_heads",
                   "kv_bytes_per_token"]
EXTRA = "extra_columns"
"""Row key holding the {column: value} an after_run hook returned for that run."""


COMPARE_FILES = (SETTINGS_FILE, "results.csv", "summary.csv", "paired.csv", "compare.json", "runs")
SWEEP_FILES = ("sweep.csv", "sweep_heatmap.png")
"""What `tlm sweep` adds to its comparison folder."""
PAIRED_FIGURE = "paired.png"
"""The seed-by-seed figure of the paired table `tlm compare` draws once an arm has two seed pairs."""


def check_settings(out: Path, settings: dict, overwrite: bool) -> list[str]:
    """A folder tlm did not write, or one from an earlier, different comparison, is refused (unless
    --overwrite); the same comparison continues. Writes nothing: returns the entries of a comparison
    written before manifests existed, which the comparison adopts into a manifest once every check has
    passed ([] for any other folder)."""
    path = out / SETTINGS_FILE
    old = _saved_settings(path)
    same = old is not None and _without_seeds(old) == _without_seeds(settings)
    check_kind(out, "compare")  # before adopting: a train run folder holds a compare_settings.json never
    if same and not read_manifest(out):  # written before manifests existed: the same comparison, adopt it
        ensure_writable(out)  # what claim() checks of a folder whose entries are (about to be) ours
        return [n for n in COMPARE_FILES if (out / n).exists()]
    # the figures too: with --overwrite a file of the user's by one of their names is refused, never replaced
    claim(out, overwrite=overwrite, writes=(*COMPARE_FILES, *SWEEP_FILES, PAIRED_FIGURE),
          own_needs_overwrite=False, kind="compare")
    if overwrite or old is None or same:  # more (or fewer) seeds of the same arms: each run stands alone
        return []
    changed = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
    raise UserError(
        f"{out} holds a different comparison (changed: {', '.join(changed)}); pass --overwrite to replace it"
    )


def _without_seeds(settings: dict) -> dict:
    return {k: v for k, v in settings.items() if k != "seeds"}


def _saved_settings(path: Path) -> dict | None:
    """The settings a comparison folder was started with; training options added to TrainConfig since
    then take their defaults (which is what that comparison trained with)."""
    if not path.is_file():
        return None
    old = read_json_object(path)
    if isinstance(old.get("base"), dict):
        defaults = {k: v for k, v in TrainConfig(steps=1).to_dict().items() if k not in PER_RUN_OR_MACHINE}
        old["base"] = {**{k: defaults[k] for k in defaults.keys() - old["base"].keys()}, **old["base"]}
    return old


def write_tables(
    out: Path, rows: list[dict], settings: dict, budget: dict, baseline: str | dict[str, str]
) -> None:
    results = pd.DataFrame(rows, columns=COMPARE_COLUMNS)
    for key in ("d_ff", "heads", "kv_heads"):
        results[key] = results[key].map(lambda w: w if isinstance(w, str) else " ".join(map(str, w)))
    # columns an after_run hook added (tlm compare --eval-tasks: "task:metric"), compared like val_loss
    extra = list(dict.fromkeys(k for r in rows for k in r.get(EXTRA, {})))
    for k in extra:
        results[k] = [r.get(EXTRA, {}).get(k, math.nan) for r in rows]
    metrics = COMPARED_METRICS + tuple(extra)
    summary = summary_table(results, metrics)
    paired = paired_table(results, baseline, metrics)
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
    """The software and the CPU the comparison ran with (each run's run.json has its own, accelerator too)."""
    return {"versions": versions(), "machine": machine(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def compare_arms(base: TrainConfig, arms: list, seeds: list[int], out: str | Path, *, overwrite: bool = False,
            data: TokenData | None = None, train_fn: Callable | None = None,
            after_run: Callable[[Path], dict] | None = None) -> dict:
    """Train every arm x seed into OUT/runs/<arm>-s<seed>/ and write the tables; returns compare.json.

    `arms`: Arm objects (see make_arms), or schedule strings trained with base.mixer. `train_fn` trains one
    run (default train.training.run_training; tests pass one that must not be called).
    after_run(run folder) -> {column: number}, on rank 0 after each run (also for runs finished in an
    earlier invocation): extra per-run columns, summarised and paired-tested like the validation loss."""
    out = Path(out)
    check_device(base.device)
    check_apart(out, [base.data] if isinstance(base.data, (str, Path)) else [])
    arms = as_arms(base, arms)
    for arm in arms:  # cheap checks before the corpus is tokenized
        arm.config(base)
    data = data if data is not None else load_token_data(base.data, base.tokenizer)
    if getattr(after_run, "needs_tokenizer", False) and data.tokenizer is None:  # before --out is touched
        raise UserError(f"--eval-tasks needs a tokenizer to turn task text into ids, and --data {base.data} "
                        "is token ids without one; use a text source or a prepared folder")
    settings = {
        "arms": [a.name for a in arms],
        "seeds": seeds,
        "base": {k: v for k, v in base.to_dict().items() if k not in PER_RUN_OR_MACHINE},
    }
    # every check before the first file is written (issue 36: the settings, the manifest and runs/ were
    # written before the first run refused, e.g. a seq_len longer than the corpus)
    budget = check_budget(base, arms, data.vocab_size)
    check_run_inputs(base, arms, seeds, data)
    adopt = check_settings(out, settings, overwrite)
    if not overwrite:
        check_runs(out, base, arms, seeds, data.vocab_size)
    by_mixer = baselines(arms)
    # one baseline name when every arm shares a mixer (compare.json as before), else mixer -> name
    baseline = next(iter(by_mixer.values())) if len(by_mixer) == 1 else by_mixer
    # under torchrun every rank runs every arm together (DDP/FSDP inside each run); rank 0 writes
    with writer_lock(out):
        return _compare(base, arms, seeds, out, overwrite, data, settings, budget, train_fn, baseline,
                        after_run, adopt)


def check_run_inputs(base: TrainConfig, arms: list[Arm], seeds: list[int], data: TokenData) -> None:
    """What each run checks before its first step (train/run.py check_compatible: the vocabulary, the
    context, this machine's memory, splits long enough for seq_len), for every arm before the comparison
    writes anything: else the first run refused after compare_settings.json, the manifest and runs/."""
    for arm in arms:
        tc = arm.config(base, seeds[0])
        check_compatible(tc, tc.model_config(data.vocab_size), data)


def _compare(
    base, arms, seeds, out: Path, overwrite: bool, data, settings, budget, train_fn, baseline, after_run,
    adopt: list[str] = (),
) -> dict:
    dist.init(resolve_device(base.device).type)
    if dist.is_main():
        with _undone_on_failure(out):  # a full disk here leaves the folder as it was
            if adopt:  # a comparison from before manifests: its files become the manifest's entries
                record(out, adopt, "compare")
            if overwrite and out.exists():
                remove_owned(out)
            runs = [f"runs/{run_name(arm.name, seed)}" for seed in seeds for arm in arms]
            record(out, [*COMPARE_FILES[:-1], *runs], "compare")
            (out / "runs").mkdir(parents=True, exist_ok=True)
            atomic_write_text(out / SETTINGS_FILE, json.dumps(settings, indent=2) + "\n")
    rows = []
    for seed in seeds:
        for arm in arms:
            dist.barrier()
            summary = _run_arm(base, arm, seed, out, data, train_fn)
            row = {"arm": arm.name, "mixer": arm.mixer, "schedule": arm.schedule, "seed": seed}
            rows.append({**summary, **row, **budget[arm.name]})
            if after_run is not None and dist.is_main():
                rows[-1][EXTRA] = after_run(out / "runs" / run_name(arm.name, seed))
            if dist.is_main():
                write_tables(out, rows, settings, budget, baseline)
    dist.barrier()
    return json.loads((out / "compare.json").read_text())


@contextlib.contextmanager
def _undone_on_failure(out: Path):
    """Setting up the comparison folder (manifest, runs/, compare_settings.json) either completes or, when
    a write fails (a full disk), leaves it as it was: new entries removed, the manifest and settings
    restored byte for byte, a folder it made removed."""
    existed = out.exists()
    saved = {n: (out / n).read_bytes() for n in (MANIFEST, SETTINGS_FILE) if (out / n).is_file()}
    had_runs = (out / "runs").exists()
    try:
        yield
    except Exception:
        with contextlib.suppress(OSError):
            if not existed:
                shutil.rmtree(out, ignore_errors=True)
            else:
                if not had_runs and (out / "runs").is_dir() and not any((out / "runs").iterdir()):
                    (out / "runs").rmdir()
                for name in (MANIFEST, SETTINGS_FILE):
                    if name in saved:
                        (out / name).write_bytes(saved[name])
                    elif (out / name).is_file():
                        (out / name).unlink()
        raise


def check_runs(out: Path, base: TrainConfig, arms: list[Arm], seeds: list[int], vocab_size: int) -> None:
    """Before a continued comparison writes anything: every finished run's run.json reads as an object,
    and every unfinished run with a checkpoint would resume (the checks of `tlm train --resume`)."""
    for seed in seeds:
        for arm in arms:
            run = out / "runs" / run_name(arm.name, seed)
            if run.is_dir():
                check_kind(run, "train")
            if (run / "run.json").is_file():
                read_json_object(run / "run.json")
            elif step_folders(run):
                tc = arm.config(base, seed)
                check_resume(run, tc, tc.model_config(vocab_size))
            elif foreign(run):  # a run that died before its first checkpoint is started again: not these
                names = foreign(run)
                raise UserError(f"{run} holds {len(names)} file(s) tlm did not write ({', '.join(names[:3])}"
                                f"{', ...' if len(names) > 3 else ''}); move them away so the comparison "
                                "can train this run there")


def _run_arm(base: TrainConfig, arm: Arm, seed: int, out: Path, data: TokenData, train_fn) -> dict:
    run = out / "runs" / run_name(arm.name, seed)
    done = run / "run.json"
    if done.is_file():  # finished in an earlier invocation
        return read_json_object(done)
    if dist.is_main() and run.is_dir() and not step_folders(run):  # died before its first checkpoint
        remove_owned(run)
    dist.barrier()
    tc = arm.config(base, seed)
    name = run_name(arm.name, seed)
    from tlm_probe.train.training import run_training  # torch is loaded only when a run trains

    summary = (train_fn or run_training)(tc, run, data=data, resume=True, description=name)
    if summary.get("interrupted"):
        # Ctrl-C or SIGTERM inside a run: its checkpoint is saved; stop the whole comparison
        raise Interrupted(summary.get("stop_signal") or signal.SIGINT)
    return summary

