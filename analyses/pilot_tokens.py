"""Pilot for the allocation study's token budget: the uniform model's validation loss vs tokens seen.

    nice -n 15 python -m analyses.pilot_tokens            # train, then collect
    python -m analyses.pilot_tokens --collect             # tables only, from finished/partial runs

The study scale of analyses/study.py (8 layers, d_model 64, mean MLP width 256, 2,048-token BPE on
builtin:pydoc, 16 x 128 tokens per step, one thread). Two uniform runs, seed 0, each with its own
warmup + cosine learning-rate schedule over its own length:
- long: STEPS_LONG steps, validation every EVAL_EVERY steps (the curve; its middle points are *not* what a
  run of that length would reach, because its learning rate has not decayed there);
- short, mid: STEPS_SHORT and STEPS_MID steps, so that two points of the curve have a real end-of-run value.
builtin:pydoc has 409,859 training tokens: past 200 steps every token is seen again (epochs).
Runs live in runs/pilot (git-ignored); the tables go to analyses/results/pilot/.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "analyses" / "results" / "pilot"
RUNS = ROOT / "runs" / "pilot"
STEPS_LONG, STEPS_MID, STEPS_SHORT, EVAL_EVERY = 1600, 800, 400, 100
TOKENS_PER_STEP = 16 * 128
MODEL = ["--d-model", "64", "--layers", "8", "--heads", "4", "--d-ff", "256", "--multiple-of", "32",
         "--seq-len", "128", "--batch-size", "16", "--warmup", "20", "--eval-tokens", "16384",
         "--threads", "1", "--seed", "0", "--schedule", "uniform"]


def tlm(*args: str) -> None:
    print("+ tlm " + " ".join(args), flush=True)
    subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], check=True)


def train() -> None:
    data = RUNS / "data-bpe2048"
    if not (data / "meta.json").is_file():
        tlm("data", "prepare", "builtin:pydoc", "--tokenizer", "bpe:2048", "--out", str(data))
    for name, steps in (("short", STEPS_SHORT), ("long", STEPS_LONG), ("mid", STEPS_MID)):
        if not (RUNS / name / "model.safetensors").is_file() or not (RUNS / name / "run.json").is_file():
            tlm("train", "--data", str(data), *MODEL, "--steps", str(steps), "--eval-interval",
                str(EVAL_EVERY), "--out", str(RUNS / name), "--json")


def collect() -> None:
    import pandas as pd

    rows = []
    for name in ("short", "mid", "long"):
        path = RUNS / name / "metrics.jsonl"
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            d = json.loads(line)
            if d.get("val_loss") is not None:
                rows.append({"run": name, "step": d["step"], "tokens": d["tokens"],
                             "val_loss": d["val_loss"]})
    if not rows:
        sys.exit("no validation losses yet in runs/pilot/*/metrics.jsonl")
    done = [RUNS / n / "run.json" for n in ("long", "mid", "short") if (RUNS / n / "run.json").is_file()]
    params = json.loads(done[0].read_text()).get("params") if done else None  # same model in both
    df = pd.DataFrame(rows).drop_duplicates(["run", "step"], keep="last")
    if params:
        df["tokens_per_param"] = df["tokens"] / params
    OUT.mkdir(parents=True, exist_ok=True)
    df.to_csv(OUT / "val_loss_vs_tokens.csv", index=False)
    print(df.to_string(index=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collect", action="store_true", help="Only collect the tables.")
    opts = ap.parse_args()
    if not opts.collect:
        train()
    collect()


if __name__ == "__main__":
    main()
