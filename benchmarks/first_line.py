"""How long a `tlm` command takes to say its first line: the commands that import torch and transformers
(HEAVY, each with inputs it accepts), run as a user starts them (a fresh `python cli.py ...`), stopped once
their first line arrives. Shared by benchmarks/bench_first_line.py and tests/test_first_line.py.

`make_inputs(folder)` writes what the invocations read: two tiny tlm checkpoints (with a byte tokenizer), a
token-id file, a text corpus and a llama2.c checkpoint; the committed probe result is read in place.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "analyses" / "results" / "mechanism" / "SmolLM2-135M-Q4_1"  # a committed probe result
TINY = ["--steps", "2", "--threads", "1", "--multiple-of", "16", "--seq-len", "16", "--d-model", "32",
        "--layers", "2", "--heads", "2", "--d-ff", "64", "--eval-tokens", "64", "--batch-size", "2"]

HEAVY = {
    "train": ["train", "--data", "{w}/corpus.txt", "--out", "{o}/run", *TINY],
    "compare": ["compare", "--schedules", "uniform,cosine:1.5:0.5", "--seeds", "0", "--data",
                "{w}/corpus.txt", "--out", "{o}/cmp", *TINY],
    "sweep": ["sweep", "--shapes", "cosine", "--ratios", "1.5:0.5", "--seeds", "0", "--data",
              "{w}/corpus.txt", "--out", "{o}/sweep", *TINY],
    "demo": ["demo", "--quick", "--out", "{o}/demo"],
    "probe": ["probe", "{w}/ck", "--data", "{w}/ids.npy", "--out", "{o}/probe", "--max-tokens", "256"],
    "diff": ["diff", "{w}/ck", "{w}/ck2", "--data", "{w}/ids.npy", "--out", "{o}/diff", "--max-tokens",
             "256"],
    "trust": ["trust", "{w}/ck", "--data", "{w}/ids.npy", "--data", "{w}/ids2.npy", "--out", "{o}/trust"],
    "eval": ["eval", "{w}/ck", "--tasks", "pydoc-lastword", "--limit", "3", "--out", "{o}/eval"],
    "generate": ["generate", "{w}/ck", "--prompt", "ab", "--max-new-tokens", "3"],
    "export": ["export", "{w}/ck", "--gguf", "--out", "{o}/ck.gguf"],
    "convert llama2c": ["convert", "llama2c", "{w}/stories.bin", "--tokenizer", "{w}/tok.bin",
                        "--out", "{o}/l2c"],
    "data prepare": ["data", "prepare", "{w}/corpus.txt", "--tokenizer", "bpe:300", "--out", "{o}/data"],
}
"""The heavy commands and an invocation of each that passes its argument checks ({w}: make_inputs's
folder, {o}: a fresh folder for outputs)."""

LIGHT_REFERENCE = ["--version"]
"""A light command run to its end: what start-up alone costs on this machine now."""


def make_inputs(w: Path) -> Path:
    """The files HEAVY's invocations read, written into `w` (imports torch: call it from a test or a
    benchmark's parent process, not from a timed child)."""
    import torch

    from tlm_probe.models.config import TLMConfig
    from tlm_probe.models.io import save_tlm
    from tlm_probe.models.tlm import TaperedLM
    from tlm_probe.tokenizer import ByteTokenizer

    w.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    cfg = TLMConfig(vocab_size=256, d_model=32, n_layers=2, n_heads=2, d_ff=(96, 32), max_seq_len=512)
    ByteTokenizer().save(save_tlm(TaperedLM(cfg), w / "ck"))
    ByteTokenizer().save(save_tlm(TaperedLM(cfg), w / "ck2"))  # diff's model B: one model twice is refused
    rng = np.random.default_rng(0)
    np.save(w / "ids.npy", rng.integers(1, 256, 4096).astype(np.uint32))
    np.save(w / "ids2.npy", rng.integers(1, 256, 4096).astype(np.uint32))
    text = "\n\n".join(f"paragraph {i}: the tapered model reads word {i * 7 % 13} twice" for i in range(200))
    (w / "corpus.txt").write_text(text)
    _llama2c(w / "stories.bin")
    _llama2c_tokenizer(w / "tok.bin")
    return w


def _llama2c(path: Path, dim=16, hidden=24, layers=2, heads=4, kv_heads=2, vocab=300, seq=32) -> None:
    """A llama2.c checkpoint (its legacy format: a header of 7 int32, then float32 weights)."""
    rng = np.random.default_rng(0)
    head = dim // heads
    shapes = [(vocab, dim), (layers, dim), (layers, dim, dim), (layers, kv_heads * head, dim),
              (layers, kv_heads * head, dim), (layers, dim, dim), (layers, dim), (layers, hidden, dim),
              (layers, dim, hidden), (layers, hidden, dim), (dim,), (seq, head // 2), (seq, head // 2)]
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab, seq))
        for shape in shapes:
            f.write((rng.standard_normal(shape) * 0.1).astype(np.float32).tobytes())


def _llama2c_tokenizer(path: Path, vocab=300) -> None:
    """llama2.c's tok*.bin: the longest piece's length, then (score, length, bytes) per piece: <unk>, BOS,
    EOS, the 256 byte pieces, then merged pieces up to `vocab`."""
    pieces = ["<unk>", "\n<s>\n", "\n</s>\n", *(f"<0x{b:02X}>" for b in range(256))]
    pieces += [f"p{i}" for i in range(vocab - len(pieces))]
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max(len(p.encode()) for p in pieces)))
        for piece in pieces:
            f.write(struct.pack("<fi", 0.0, len(piece.encode())) + piece.encode())


def args_of(name: str, w: Path, o: Path) -> list[str]:
    return [a.replace("{w}", str(w)).replace("{o}", str(o)) for a in HEAVY.get(name, LIGHT_REFERENCE)]


def env() -> dict:
    """A user's environment: offline, bytecode cached as an installed package has it, no announce
    override (progress.py's TLM_ANNOUNCE_AFTER_S)."""
    out = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TERM": "dumb", "PYTHONUNBUFFERED": "1"}
    for key in ("TLM_ANNOUNCE_AFTER_S", "PYTHONDONTWRITEBYTECODE"):
        out.pop(key, None)
    return out


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a running process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class FirstLine:
    wall: float  # seconds from the start to the first line on stdout or stderr
    cpu: float  # the process's CPU seconds when that line arrived
    line: str
    code: int | None  # the exit code where the command ended before its first line (else None: stopped)


def first_line(args: list[str], cwd: Path, timeout: float = 300) -> FirstLine:
    """Start `python cli.py ARGS` and stop it (SIGKILL) when its first line arrives on stdout or stderr."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *args], cwd=cwd, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        wall = time.perf_counter() - t0
        try:
            cpu = _cpu_seconds(proc.pid)
        except (FileNotFoundError, ProcessLookupError):  # it had ended: its whole CPU time
            cpu = float("nan")
        code = proc.poll()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=timeout)
    return FirstLine(wall, cpu, line.rstrip("\n"), code)


def whole_run(args: list[str], cwd: Path, timeout: float = 300) -> FirstLine:
    """A light command run to its end: its wall and CPU seconds (the child's rusage)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], cwd=cwd, env=env(), timeout=timeout,
                         capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return FirstLine(wall, cpu, (res.stdout + res.stderr).split("\n", 1)[0], res.returncode)
