"""Several processes through the real entry point (torchrun + tlm train, gloo on CPU) against one process
with the same global batch: DDP and FSDP2 (each rank a slice of the batch; rank 0 writes)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = str(Path(__file__).resolve().parents[1] / "cli.py")
COMMON = ["--steps", "6", "--seq-len", "16", "--d-model", "32", "--layers", "2", "--heads", "2",
          "--d-ff", "64", "--eval-interval", "3", "--eval-tokens", "256", "--log-interval", "1",
          "--lr", "1e-2", "--warmup", "2", "--device", "cpu", "--threads", "1"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def _metrics(run: Path, kind: str, key: str) -> list[tuple[int, float]]:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [(m["step"], m[key]) for m in lines if m["kind"] == kind]


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]


def _max_diff(a: Path, b: Path) -> float:
    worst = 0.0
    for kind, key in (("train", "train_loss"), ("eval", "val_loss")):
        x, y = _metrics(a, kind, key), _metrics(b, kind, key)
        assert [s for s, _ in x] == [s for s, _ in y] and len(x) >= 3
        worst = max(worst, *(abs(u - v) for (_, u), (_, v) in zip(x, y, strict=True)))
    return worst


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> tuple[Path, list[str]]:
    """One process, batch 4; its corpus and flags are shared with the multi-process runs."""
    tmp = tmp_path_factory.mktemp("ddp")
    words = ["alpha", "beta", "gamma", "delta", "tapered", "uniform", "layer", "width", "depth", "token"]
    paragraphs = [f"{i}: " + " ".join(words[(i * 7 + j * j) % 10] for j in range(40)) for i in range(120)]
    (tmp / "corpus.txt").write_text("\n\n".join(paragraphs))
    flags = [*COMMON, "--data", str(tmp / "corpus.txt")]
    from typer.testing import CliRunner

    from cli import app  # in-process: saves one interpreter start

    r = CliRunner().invoke(app, ["train", "--out", str(tmp / "one"), "--batch-size", "4", *flags])
    assert r.exit_code == 0, r.output
    return tmp, flags


def test_two_gloo_ddp_processes_match_one(single):
    tmp, flags = single
    _run([*TORCHRUN, CLI, "train", "--out", str(tmp / "ddp"), "--batch-size", "2", *flags])
    assert json.loads((tmp / "ddp" / "run.json").read_text())["world_size"] == 2
    worst = _max_diff(tmp / "one", tmp / "ddp")
    print(f"DDP (2 processes) vs 1 process, max abs loss difference: {worst:.3g}")
    assert worst < 1e-5


def test_fsdp2_matches_one(single):
    tmp, flags = single
    _run([*TORCHRUN, CLI, "train", "--out", str(tmp / "fsdp"), "--batch-size", "2", "--fsdp", *flags])
    worst = _max_diff(tmp / "one", tmp / "fsdp")
    print(f"FSDP2 (2 processes) vs 1 process, max abs loss difference: {worst:.3g}")
    assert worst < 1e-5


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_nodes(tmp: Path, out: str, extra: list[str], flags: list[str]) -> None:
    """Two torchrun launchers, as on two machines: --nnodes 2, 2 processes each, meeting through the c10d
    rendezvous at one endpoint (the multi-node recipe of the README, on one machine)."""
    port = _free_port()
    launch = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "2",
              "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", f"tlm-{port}"]
    cmd = [*launch, CLI, "train", "--out", str(tmp / out), "--batch-size", "1", *extra, *flags]
    nodes = [subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for node in nodes:
        _, err = node.communicate(timeout=400)
        assert node.returncode == 0, err[-2000:]


def test_two_nodes_of_two_processes_through_the_rendezvous_match_one(single):
    tmp, flags = single
    _two_nodes(tmp, "nodes", [], flags)
    assert json.loads((tmp / "nodes" / "run.json").read_text())["world_size"] == 4
    worst = _max_diff(tmp / "one", tmp / "nodes")
    print(f"2 nodes x 2 processes (c10d rendezvous) vs 1 process, max abs loss difference: {worst:.3g}")
    assert worst < 1e-5


def test_fsdp2_checkpoint_of_four_ranks_resumes_on_two(single):
    """FSDP2 over 4 ranks stops at step 3 (one checkpoint, written once); 2 ranks resume it to the end:
    the same losses as one uninterrupted process."""
    tmp, flags = single
    _two_nodes(tmp, "fsdp4", ["--fsdp", "--stop-at", "3", "--ckpt-interval", "3"], flags)
    _run([*TORCHRUN, CLI, "train", "--out", str(tmp / "fsdp4"), "--batch-size", "2", "--fsdp", "--resume",
          "--ckpt-interval", "3", *flags])
    assert json.loads((tmp / "fsdp4" / "run.json").read_text())["world_size"] == 2
    worst = _max_diff(tmp / "one", tmp / "fsdp4")
    print(f"FSDP2 4 ranks -> resumed on 2 vs 1 process, max abs loss difference: {worst:.3g}")
    assert worst < 1e-5
