"""Study 1 re-scored on study 2's primary outcome (issue 44 part 4; post hoc, stated as such).

Study 1's checkpoints did not survive its sessions (only their small files are committed), so its 36 main
runs are re-trained with study 1's exact command (its validation as then: --eval-sample prefix) after study
2's runs, by the same queue. The first re-trained run (uniform-s0) is checked first against its committed
metrics.jsonl: every training-loss record must be identical, bit for bit (check.json says whether it was);
every re-trained run is then scored on study 2's primary outcome (SCORES["test.csv"]) and its small files go
to results/confirm/rescore/runs/NAME/. The re-scored contrasts are study 1's primary contrasts (Holm over
three) computed on this outcome: rescore/contrasts.csv (analyses.confirm_stats.primary_contrasts).
"""

from __future__ import annotations

import json
from pathlib import Path

from analyses import confirm as study1
from analyses.confirm2 import SCORES, export

CHECKED = "uniform-s0"


def jobs() -> list[dict]:
    """Study 1's main runs, the checked one first."""
    main = [j for j in study1.jobs() if j["lr"] is None and not j["name"].startswith("source-")]
    main.sort(key=lambda j: j["name"] != CHECKED)
    return [j | {"lr": "3e-3"} for j in main]


def train_args(j: dict, data: Path) -> list[str]:
    schedule = str(study1.RESULTS / study1.DERIVED) if j["arm"] == study1.DERIVED else j["arm"]
    return [*study1.train_args(j | {"lr": None}, data, schedule), "--eval-sample", "prefix"]


def training_records(path: Path) -> list[str]:
    """The metrics.jsonl training and validation records: losses, gradient norms, learning rates (not the
    rates in tokens/s, which are timing)."""
    keep = ("kind", "step", "tokens", "train_loss", "grad_norm", "lr", "val_loss")
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") in ("train", "eval"):
            out.append(json.dumps({k: rec.get(k) for k in keep}))
    return out


def results_of(opts) -> Path:
    """results/confirm/rescore beside results/confirm2 (the main checkout's, from a pinned worktree)."""
    return opts.results.parent / "confirm" / "rescore"


def check(run: Path) -> dict:
    committed = training_records(study1.RESULTS / "runs" / CHECKED / "metrics.jsonl")
    again = training_records(run / "metrics.jsonl")
    diff = next((i for i, (a, b) in enumerate(zip(committed, again, strict=False)) if a != b), None)
    same = diff is None and len(committed) == len(again)
    return {"run": CHECKED, "records": len(committed), "identical": same,
            "first_difference": None if same else {"index": diff, "committed": committed[diff] if diff
                                                   is not None else None,
                                                   "again": again[diff] if diff is not None else None}}


def run_one(j: dict, opts, data: Path) -> None:
    root, results = opts.root / "rescore1", results_of(opts)
    run, ev = root / "runs" / j["name"], root / "eval" / j["name"]
    started = root / "started" / f"{j['name']}.txt"
    started.parent.mkdir(parents=True, exist_ok=True)
    if not started.is_file():
        started.write_text(study1.time.strftime("%Y-%m-%dT%H:%M:%SZ", study1.time.gmtime()))
    with (opts.root / "logs" / f"rescore1-{j['name']}.log").open("a") as log:
        if not (run / "run.json").is_file():
            resume = ["--resume"] if (run / "state").is_dir() else []
            study1.tlm(*train_args(j, data), "--out", str(run), *resume, log=log)
        if j["name"] == CHECKED and not (results / "check.json").is_file():
            results.mkdir(parents=True, exist_ok=True)
            (results / "check.json").write_text(json.dumps(check(run), indent=2) + "\n")
        name, args = "test.csv", SCORES["test.csv"]
        if not (ev / name / "results.csv").is_file():
            study1.tlm("eval", str(run), "--ppl-data", str(data), *args, "--out", str(ev / name), log=log)
    export(j, run, ev, started.read_text(), results, scores=("test.csv",))


def run(opts, data: Path, drain) -> list[str]:
    todo = [j for j in jobs() if not (results_of(opts) / "runs" / j["name"] / "run.json").is_file()]
    return drain(todo, opts, data, run_one)
