"""DDP through the real entry point: torchrun with 2 gloo processes vs 1 process, same global batch."""

import json
import os
import subprocess
import sys
from pathlib import Path

CLI = str(Path(__file__).resolve().parents[1] / "cli.py")
COMMON = [
    "--steps",
    "6",
    "--seq-len",
    "16",
    "--d-model",
    "32",
    "--layers",
    "2",
    "--heads",
    "2",
    "--d-ff",
    "64",
    "--eval-interval",
    "3",
    "--eval-tokens",
    "256",
    "--log-interval",
    "1",
    "--lr",
    "1e-2",
    "--warmup",
    "2",
    "--device",
    "cpu",
    "--json",
]


def _metrics(run: Path, kind: str, key: str) -> list[tuple[int, float]]:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [(m["step"], m[key]) for m in lines if m["kind"] == kind]


def _corpus(tmp_path: Path) -> str:
    words = ["alpha", "beta", "gamma", "delta", "tapered", "uniform", "layer", "width", "depth", "token"]
    paragraphs = [f"{i}: " + " ".join(words[(i * 7 + j * j) % 10] for j in range(40)) for i in range(120)]
    (tmp_path / "corpus.txt").write_text("\n\n".join(paragraphs))
    return str(tmp_path / "corpus.txt")


def test_two_gloo_processes_match_one(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    data = ["--data", _corpus(tmp_path)]
    one = [sys.executable, CLI, "train", "--out", str(tmp_path / "one"), "--batch-size", "4", *COMMON, *data]
    two = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        CLI,
        "train",
        "--out",
        str(tmp_path / "two"),
        "--batch-size",
        "2",
        *COMMON,
        *data,
    ]
    for cmd in (one, two):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=280)
        assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "two" / "run.json").read_text())
    assert summary["world_size"] == 2
    for kind, key in (("train", "train_loss"), ("eval", "val_loss")):
        a, b = _metrics(tmp_path / "one", kind, key), _metrics(tmp_path / "two", kind, key)
        assert [s for s, _ in a] == [s for s, _ in b] and len(a) >= 3
        worst = max(abs(x - y) for (_, x), (_, y) in zip(a, b, strict=True))
        print(f"DDP vs single, max abs {key} difference: {worst:.3g}")
        assert worst < 1e-5
