"""Study 2 (issue 44), pre-registered in analyses/results/confirm2/PREREGISTRATION.md: the probe-derived
allocation against uniform and against a wide first MLP alone, scored on a sample spread over the whole
test split.

    python -m analyses.confirm2 design     # write results/confirm2/design.json (committed with the prereg)
    python -m analyses.confirm2 run        # every job, two at a time, resuming whatever was interrupted
    python -m analyses.confirm2 collect    # STATUS.md always; the registered tables once all main runs are in

One run = `tlm train` of one (arm, seed, lr) into ROOT/runs/NAME, then three `tlm eval`s of its final model
(SCORES: the primary outcome, the continuity outcome and a validation score), then its small files exported
to results/confirm2/runs/NAME/: run.json (with the driver's wall-clock `started` and `ended` and the final
weights' sha256), config.json, train_config.json, metrics.jsonl, data.json and one CSV per score. A run whose
exported folder exists is finished. `run` refuses to start when this file's design differs from the
committed design.json, or the prepared corpus from corpus.json. After the main runs and the learning-rate
check, the queue re-trains study 1's runs for its post-hoc re-scoring (analyses.confirm_rescore).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from analyses import confirm as study1

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "analyses" / "results" / "confirm2"
DERIVED = "probe-derived.json"
"""Study 1's frozen schedule, copied unchanged (512,256,64,96,96,192,224,352,512)."""
WIDE_FIRST = "512,224,224,224,224,224,224,224,224"
"""Layer 0 at the probe-derived arm's width, the other 8 uniform: 512 + 8 x 224 = 9 x 256 exactly."""
ARMS = {"uniform": "uniform", "probe-derived": DERIVED, "wide-first": WIDE_FIRST}
CONTRASTS = ("probe-derived", "wide-first")
SEEDS = tuple(range(9, 35))
"""26 pairs: the fewest with >= 80% power (0.801) for d_z 0.6375 (study 1's probe-derived -0.0266 nats at
paired SD 0.0417) by a two-sided paired t-test at alpha 0.025 (Holm's first step over two contrasts)."""
MAIN_LR = "3e-3"
LR_CHECK = {"lrs": ("6e-3", "1.2e-2"), "arms": ("uniform", "cosine:1.5:0.5", "probe-derived"),
            "seeds": (9, 10, 11)}
"""Upward learning-rate check (descriptive, validation only). 1.2e-2 runs only if 6e-3 helps: the mean over
the 9 (arm, seed) pairs of val_nll(6e-3) - val_nll(3e-3) is below 0."""
PRIMARY_TOKENS = 1_048_576
CONTINUITY_TOKENS = 262_144
COMMON = ["--batch-size", "16", "--threads", "1", "--seed", "0"]
SCORES = {
    "test.csv": ["--split", "test", "--max-tokens", str(PRIMARY_TOKENS), "--sample", "spread", *COMMON],
    "test_prefix.csv": ["--split", "test", "--max-tokens", str(CONTINUITY_TOKENS), "--sample", "prefix",
                        *COMMON],
    "val.csv": ["--split", "val", "--max-tokens", str(PRIMARY_TOKENS), "--sample", "spread", *COMMON],
}
"""Primary outcome (1,048,576 test tokens in 8,192 windows drawn across the whole test split, the same
windows for every run); study 1's outcome (the first 262,144 test tokens) for continuity; validation (the
learning-rate check's score)."""
TRAIN = [*study1.TRAIN, "--eval-sample", "spread"]
EXPORT = ("config.json", "train_config.json", "metrics.jsonl", "data.json")


def design() -> dict:
    """Everything the pre-registration fixes, as data (design.json)."""
    return {"data": list(study1.DATA), "model": study1.MODEL, "train": TRAIN, "arms": ARMS,
            "contrasts": list(CONTRASTS), "seeds": list(SEEDS), "main_lr": MAIN_LR,
            "lr_check": {k: list(v) for k, v in LR_CHECK.items()}, "scores": SCORES}


def job(arm: str, seed: int, lr: str = MAIN_LR) -> dict:
    prefix = "" if lr == MAIN_LR else f"lr{lr}-"
    return {"name": f"{prefix}{study1.slug(arm)}-s{seed}", "arm": arm, "seed": seed, "lr": lr}


def main_jobs(seeds=SEEDS) -> list[dict]:
    """Seed by seed, so a partial study is balanced across arms."""
    return [job(a, s) for s in seeds for a in ARMS]


def lr_jobs(lr: str) -> list[dict]:
    """One learning rate of the check; at 3e-3 only the arm the main runs lack (cosine)."""
    arms = [a for a in LR_CHECK["arms"] if lr != MAIN_LR or a not in ARMS]
    return [job(a, s, lr) for s in LR_CHECK["seeds"] for a in arms]


def jobs() -> list[dict]:
    """Main runs of the check's seeds, the check at 3e-3 (cosine) and 6e-3, the other main runs; then the
    conditional 1.2e-2 runs (decided in run() from validation scores only)."""
    first = len(LR_CHECK["seeds"])
    return [*main_jobs(SEEDS[:first]), *lr_jobs(MAIN_LR), *lr_jobs(LR_CHECK["lrs"][0]),
            *main_jobs(SEEDS[first:])]


def schedule_of(arm: str, results: Path) -> str:
    spec = ARMS.get(arm, arm)
    return str(results / spec) if spec == DERIVED else spec


def train_args(j: dict, data: Path, results: Path) -> list[str]:
    args = ["train", "--data", str(data), *study1.MODEL, *TRAIN, "--schedule", schedule_of(j["arm"], results),
            "--seed", str(j["seed"])]
    args[args.index("--lr") + 1] = j["lr"]
    return args


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def run_one(j: dict, opts, data: Path) -> None:
    """Train (or resume), score, export. Idempotent; the export is one rename."""
    run, ev = opts.root / "runs" / j["name"], opts.root / "eval" / j["name"]
    started = opts.root / "started" / f"{j['name']}.txt"
    if not started.is_file():
        started.write_text(now())
    with (opts.root / "logs" / f"{j['name']}.log").open("a") as log:
        if not (run / "run.json").is_file():
            resume = ["--resume"] if (run / "state").is_dir() else []
            study1.tlm(*train_args(j, data, opts.results), "--out", str(run), *resume, log=log)
        for name, args in SCORES.items():
            if not (ev / name / "results.csv").is_file():
                study1.tlm("eval", str(run), "--ppl-data", str(data), *args, "--out", str(ev / name), log=log)
    export(j, run, ev, started.read_text(), opts.results)


def export(j: dict, run: Path, ev: Path, started: str, results: Path, scores=tuple(SCORES)) -> None:
    dst = results / "runs" / j["name"]
    tmp = dst.with_name(dst.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    info = json.loads((run / "run.json").read_text())
    info.update(started=started, ended=now(), model_sha256=sha256(run / "model.safetensors"),
                arm=j["arm"], lr=j["lr"])
    (tmp / "run.json").write_text(json.dumps(info, indent=2) + "\n")
    for name in EXPORT:
        if (run / name).is_file():
            shutil.copyfile(run / name, tmp / name)
    for name in scores:
        shutil.copyfile(ev / name / "results.csv", tmp / name)
        shutil.copyfile(ev / name / "provenance.json", tmp / name.replace(".csv", "_provenance.json"))
    tmp.rename(dst)


def is_done(results: Path, j: dict) -> bool:
    return (results / "runs" / j["name"] / "run.json").is_file()


class Queue:
    def __init__(self, todo: list[dict]):
        self.todo, self.lock, self.failed = list(todo), threading.Lock(), []

    def take(self) -> dict | None:
        with self.lock:
            return self.todo.pop(0) if self.todo else None


def worker(queue: Queue, opts, data: Path, fn) -> None:
    while (j := queue.take()) is not None:
        try:
            fn(j, opts, data)
        except subprocess.CalledProcessError as e:
            print(f"{j['name']} failed ({e}); see {opts.root / 'logs' / j['name']}.log", flush=True)
            queue.failed.append(j["name"])


def drain(todo: list[dict], opts, data: Path, fn=run_one) -> list[str]:
    queue = Queue(todo)
    threads = [threading.Thread(target=worker, args=(queue, opts, data, fn)) for _ in range(opts.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return queue.failed


def check_design(results: Path) -> None:
    path = results / "design.json"
    if not path.is_file() or json.loads(path.read_text()) != design():
        sys.exit(f"error: {path} is missing or differs from analyses/confirm2.py's design; the study runs "
                 "only the committed pre-registered design")


def run(opts) -> None:
    from analyses import confirm2_stats, confirm_rescore

    check_design(opts.results)
    data = study1.prepare(opts)
    for sub in ("logs", "started"):
        (opts.root / sub).mkdir(parents=True, exist_ok=True)
    failed = drain([j for j in jobs() if not is_done(opts.results, j)], opts, data)
    high = lr_jobs(LR_CHECK["lrs"][1])
    if confirm2_stats.lr_helps(opts.results, LR_CHECK["lrs"][0]):
        failed += drain([j for j in high if not is_done(opts.results, j)], opts, data)
    failed += confirm_rescore.run(opts, data, drain)
    print(f"done; failed: {failed or 'none'}", flush=True)


def collect(opts) -> None:
    """Study 2's tables (and figure, once complete), then study 1's re-score's, where its runs are."""
    from analyses import confirm2_stats, confirm_rescore, confirm_rescore_stats, paired_figure

    if confirm2_stats.write_all(opts.results):  # every main run is in: the contrasts, seed by seed
        paired_figure.draw("confirm2", opts.results)
    rescore = confirm_rescore.results_of(opts)
    if (rescore / "runs").is_dir() and confirm_rescore_stats.write_all(rescore):
        paired_figure.draw("rescore", rescore)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("part", choices=("design", "run", "collect"))
    p.add_argument("--root", type=Path, default=REPO / "runs" / "confirm2", help="runs, eval, logs, data")
    p.add_argument("--workers", type=int, default=2, help="runs at a time (one thread each)")
    p.add_argument("--results", type=Path, default=RESULTS, help="where the committed files go (from a "
                   "pinned worktree: the main checkout's analyses/results/confirm2)")
    opts = p.parse_args()
    opts.root.mkdir(parents=True, exist_ok=True)
    if opts.part == "design":
        opts.results.mkdir(parents=True, exist_ok=True)
        (opts.results / "design.json").write_text(json.dumps(design(), indent=2) + "\n")
    elif opts.part == "run":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        run(opts)
    else:
        collect(opts)


if __name__ == "__main__":
    main()
