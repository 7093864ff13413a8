"""Issue 31's confirmatory allocation study, pre-registered in analyses/results/confirm/PREREGISTRATION.md.

    python -m analyses.confirm design      # write results/confirm/design.json (committed with the prereg)
    python -m analyses.confirm prepare     # tlm data prepare builtin:env --tokenizer bpe:2048 (hash checked)
    python -m analyses.confirm run         # every run, two at a time, resuming whatever was interrupted
    python -m analyses.confirm collect     # tables from the committed per-run files (analyses.confirm_stats)

One run = `tlm train` of one (arm, seed[, lr]) into ROOT/runs/NAME, then `tlm eval` of its final model on
the corpus' test split (never used to derive or select anything) into ROOT/eval/NAME, then its small files
exported to results/confirm/runs/NAME/ (run.json, config.json, metrics.jsonl, test.csv). A run whose
exported test.csv exists is finished: the committed files carry the study across sessions and machines;
the checkpoints under ROOT (git-ignored) only carry an interrupted run to its end (`tlm train --resume`).
The probe-derived arm waits for its frozen schedule (results/confirm/probe-derived.json), which
analyses.confirm_derive writes from a uniform model of a seed outside the study, probed on training tokens.
`run` refuses to start when this file's design differs from the committed design.json: the design
cannot drift after the pre-registration.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "analyses" / "results" / "confirm"
DERIVED = "probe-derived.json"
DATA = ("builtin:env", "bpe:2048")
MODEL = ["--d-model", "64", "--layers", "9", "--heads", "4", "--d-ff", "256", "--multiple-of", "32"]
TRAIN = ["--seq-len", "128", "--batch-size", "16", "--steps", "3700", "--warmup", "100", "--lr", "3e-3",
         "--eval-interval", "250", "--eval-tokens", "16384", "--ckpt-interval", "250", "--keep-last", "1",
         "--threads", "1"]
ARMS = ("uniform", "cosine:1.5:0.5", "hourglass", DERIVED)
SEEDS = tuple(range(9))
SOURCE = ("uniform", 100)
"""The probe-derived arm's source model: uniform, a seed outside SEEDS."""
LR_CHECK = {"lr": "1.5e-3", "arms": ("uniform", "cosine:1.5:0.5"), "seeds": (0, 1)}
TEST_TOKENS = 262144
EVAL = ["--split", "test", "--max-tokens", str(TEST_TOKENS), "--batch-size", "16", "--threads", "1"]
EXPORT = ("run.json", "config.json", "train_config.json", "metrics.jsonl", "data.json")


def design() -> dict:
    """Everything the pre-registration fixes, as data (design.json)."""
    return {"data": list(DATA), "model": MODEL, "train": TRAIN, "arms": list(ARMS), "seeds": list(SEEDS),
            "source": list(SOURCE), "lr_check": {k: list(v) if isinstance(v, tuple) else v
                                                 for k, v in LR_CHECK.items()},
            "test_tokens": TEST_TOKENS, "eval": EVAL}


def slug(arm: str) -> str:
    return arm.removesuffix(".json").replace(":", "_").replace("/", "_")


def jobs() -> list[dict]:
    """Every training run in the order they are taken: the source first, then seed by seed (so a partial
    study is balanced across arms), then the learning-rate check."""
    arm, seed = SOURCE
    source = {"name": f"source-{slug(arm)}-s{seed}", "arm": arm, "seed": seed, "lr": None}
    out = [source]
    out += [{"name": f"{slug(a)}-s{s}", "arm": a, "seed": s, "lr": None} for s in SEEDS for a in ARMS]
    out += [{"name": f"lr{LR_CHECK['lr']}-{slug(a)}-s{s}", "arm": a, "seed": s, "lr": LR_CHECK["lr"]}
            for s in LR_CHECK["seeds"] for a in LR_CHECK["arms"]]
    return out


def tlm(*args: str, log=None) -> None:
    cmd = [sys.executable, str(REPO / "cli.py"), *args]
    print(f"{time.strftime('%H:%M:%S')} + tlm " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT if log else None)


def data_folder(root: Path) -> Path:
    return root / f"data-{DATA[0].split(':')[1]}-{DATA[1].replace(':', '')}"


def prepare(opts) -> Path:
    """The corpus folder, prepared once; its content hashes must equal the pre-registered ones."""
    folder = data_folder(opts.root)
    if not (folder / "meta.json").is_file():
        tlm("data", "prepare", DATA[0], "--tokenizer", DATA[1], "--out", str(folder))
    meta = json.loads((folder / "meta.json").read_text())
    fixed = opts.results / "corpus.json"
    if fixed.is_file():
        want = json.loads(fixed.read_text())
        got = corpus_record(meta)
        if got != want:
            sys.exit(f"error: {folder} differs from the pre-registered corpus ({fixed}): {got} != {want}")
    return folder


def corpus_record(meta: dict) -> dict:
    """What the pre-registration fixes of the corpus: per split documents, tokens and content hash."""
    return {s: {k: meta[s][k] for k in ("documents", "tokens", "content_hash")}
            for s in ("train", "val", "test")} | {"tokenizer_hash": meta["tokenizer_hash"]}


def check_design(results: Path) -> None:
    path = results / "design.json"
    if not path.is_file() or json.loads(path.read_text()) != design():
        sys.exit(f"error: {path} is missing or differs from analyses/confirm.py's design; the study runs "
                 "only the committed pre-registered design")


def train_args(job: dict, data: Path, schedule: str) -> list[str]:
    args = ["train", "--data", str(data), *MODEL, *TRAIN, "--schedule", schedule, "--seed", str(job["seed"])]
    if job["lr"] is not None:
        args[args.index("--lr") + 1] = job["lr"]
    return args


def run_one(job: dict, opts, data: Path) -> None:
    """Train (or resume), evaluate on the test split, export the small files. Idempotent."""
    run, ev = opts.root / "runs" / job["name"], opts.root / "eval" / job["name"]
    dst = opts.results / "runs" / job["name"]
    schedule = str(opts.results / DERIVED) if job["arm"] == DERIVED else job["arm"]
    with (opts.root / "logs" / f"{job['name']}.log").open("a") as log:
        if not (run / "run.json").is_file():
            resume = ["--resume"] if (run / "state").is_dir() else []
            tlm(*train_args(job, data, schedule), "--out", str(run), *resume, log=log)
        if not (ev / "results.csv").is_file():
            tlm("eval", str(run), "--ppl-data", str(data), *EVAL, "--out", str(ev), log=log)
    tmp = dst.with_name(dst.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in EXPORT:
        if (run / name).is_file():
            shutil.copyfile(run / name, tmp / name)
    shutil.copyfile(ev / "results.csv", tmp / "test.csv")
    tmp.rename(dst)


def is_done(results: Path, job: dict) -> bool:
    return (results / "runs" / job["name"] / "test.csv").is_file()


class Queue:
    """Jobs handed to workers one at a time; the probe-derived arm waits for its frozen schedule."""

    def __init__(self, todo: list[dict], results: Path):
        self.todo, self.lock, self.failed, self.results = list(todo), threading.Lock(), [], results

    def take(self) -> dict | None | str:
        with self.lock:
            ready = [j for j in self.todo if j["arm"] != DERIVED or (self.results / DERIVED).is_file()]
            if not ready:
                return "wait" if self.todo else None
            self.todo.remove(ready[0])
            return ready[0]


def worker(queue: Queue, opts, data: Path) -> None:
    while (job := queue.take()) is not None:
        if job == "wait":
            if not _derive_pending(opts):
                return
            time.sleep(60)
            continue
        try:
            run_one(job, opts, data)
            if job["name"].startswith("source-"):
                derive(opts, data)
        except subprocess.CalledProcessError as e:
            print(f"{job['name']} failed ({e}); see {opts.root / 'logs' / job['name']}.log", flush=True)
            queue.failed.append(job["name"])


def _derive_pending(opts) -> bool:
    """True while the source run may still produce the frozen schedule (so waiting makes sense)."""
    return not (opts.results / DERIVED).is_file() and jobs()[0]["name"] not in opts.failed


def derive(opts, data: Path) -> None:
    from analyses import confirm_derive

    if not (opts.results / DERIVED).is_file():
        confirm_derive.derive(opts, opts.root / "runs" / jobs()[0]["name"], data, tlm, MODEL, DERIVED)


def run(opts) -> None:
    check_design(opts.results)
    data = prepare(opts)
    (opts.root / "logs").mkdir(parents=True, exist_ok=True)
    if is_done(opts.results, jobs()[0]):  # the source finished earlier: freeze its schedule first
        derive(opts, data)
    queue = Queue([j for j in jobs() if not is_done(opts.results, j)], opts.results)
    opts.failed = queue.failed
    threads = [threading.Thread(target=worker, args=(queue, opts, data)) for _ in range(opts.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"done; failed: {queue.failed or 'none'}", flush=True)


def collect(opts) -> None:
    from analyses import confirm_section, confirm_stats

    summary = confirm_stats.write_all(opts.results)
    if summary:  # every main run has finished: the docs' table and sentences (section.md)
        df = confirm_stats.load_runs(opts.results)
        text = "\n".join(confirm_section.section(df, summary)) + "\n"
        (opts.results / "section.md").write_text(text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("part", choices=("design", "prepare", "run", "collect"))
    p.add_argument("--root", type=Path, default=REPO / "runs" / "confirm", help="runs, eval, logs, data")
    p.add_argument("--workers", type=int, default=2, help="runs at a time (one thread each)")
    p.add_argument("--results", type=Path, default=RESULTS, help="where the committed files go (from a "
                   "pinned worktree: the main checkout's analyses/results/confirm)")
    opts = p.parse_args()
    opts.root.mkdir(parents=True, exist_ok=True)
    opts.failed = []
    if opts.part == "design":
        opts.results.mkdir(parents=True, exist_ok=True)
        (opts.results / "design.json").write_text(json.dumps(design(), indent=2) + "\n")
    elif opts.part == "prepare":
        meta = json.loads((prepare(opts) / "meta.json").read_text())
        print(json.dumps(corpus_record(meta), indent=2))
    elif opts.part == "run":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        run(opts)
    else:
        collect(opts)


if __name__ == "__main__":
    main()
