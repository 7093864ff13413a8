"""Ctrl-C (SIGINT) and SIGTERM through the real `tlm` entry point (cli.main) in a subprocess that is sent the
signal: one line on stderr, exit code 130 / 143 (128 + the signal, as a shell reports it), no traceback,
and for a command that had written nothing yet, the folder as it was (the lock released). Before: SIGTERM
killed `tlm probe` on the spot (exit -15, no word, its lock file left behind), Ctrl-C during `tlm eval`
exited 130 without a word, and a SIGTERM to `tlm train` exited 130 like Ctrl-C."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from test_bad_input_catalogue import snapshot
from tiny_flags import TINY

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM

ROOT = Path(__file__).resolve().parents[1]
# The command runs as `tlm` does (cli.main). `stall` replaces the function the command calls for its
# work: it says READY and sleeps, so the signal lands while the command is busy, at a known point.
# SIGINT is reset to Python's default handler: a shell's background job (CI, `cmd &`) starts with
# SIGINT ignored, where a terminal's Ctrl-C reaches a foreground job.
SCRIPT = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
module, name = sys.argv[1].split(":")
if module:
    def stall(*args, **kwargs):
        print("READY", flush=True)
        time.sleep(300)
    setattr(__import__(module, fromlist=[name]), name, stall)
sys.argv = ["tlm", *sys.argv[2:]]
import cli
cli.main()
"""
TIMEOUT = 300  # seconds for a command to reach its work on a loaded 2-core machine


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("signals")
    torch.manual_seed(0)
    cfg = TLMConfig(vocab_size=256, d_model=16, n_layers=2, n_heads=2, d_ff=(48, 16), max_seq_len=64)
    ck = save_tlm(TaperedLM(cfg), root / "ck")
    (ck / "tlm_tokenizer.json").write_text('{"kind": "byte"}\n')
    np.save(root / "ids.npy", np.arange(4096) % 256)
    return root


def _send(work: Path, stall: str, argv: list[str], sig: int, ready) -> tuple[int, str]:
    """Start the command, wait until `ready(proc)` says it is working, send `sig`; (exit code, stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, stall, *argv], cwd=work, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not ready(proc):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command never reached its work"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err


def _said_ready(proc) -> bool:
    if select.select([proc.stdout], [], [], 1.0)[0]:
        return proc.stdout.readline().strip() == "READY"
    return False


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("importing torch and transformers")]
    assert len(lines) == 1, err  # besides the import phase a slow start announces (progress.py)
    return lines[0]


STOPS = [(signal.SIGTERM, 143), (signal.SIGINT, 130)]


@pytest.mark.parametrize("sig,code", STOPS, ids=["SIGTERM", "SIGINT"])
def test_probe_stopped_says_so_and_leaves_the_folder_as_it_was(work, sig, code):
    before = snapshot(work)
    rc, err = _send(work, "tlm_probe.probe.engine:run_probe",
                    ["probe", "ck", "--data", "ids.npy", "--out", "out"], sig, _said_ready)
    assert rc == code
    assert _one_line(err) == "interrupted; nothing written to out"
    assert snapshot(work) == before  # no results, no lock file left behind


@pytest.mark.parametrize("sig,code", STOPS, ids=["SIGTERM", "SIGINT"])
def test_eval_stopped_is_one_line(work, sig, code):
    before = snapshot(work)
    rc, err = _send(work, "tlm_probe.eval.run:run_eval",
                    ["eval", "ck", "--tasks", "pydoc-lastword", "--out", "ev"], sig, _said_ready)
    assert rc == code
    assert _one_line(err) == f"interrupted by {signal.Signals(sig).name}; tlm eval stopped"
    assert snapshot(work) == before


def test_generate_sigterm_is_one_line(work):
    rc, err = _send(work, "tlm_probe.generation:generate_text", ["generate", "ck", "--prompt", "ab"],
                    signal.SIGTERM, _said_ready)
    assert rc == 143
    assert _one_line(err) == "interrupted by SIGTERM; tlm generate stopped"


def test_train_sigterm_saves_and_exits_143(work):
    """A real run (nothing stalled): the signal arrives once its first metrics are logged; the loop saves
    a checkpoint, and the exit code says SIGTERM, not Ctrl-C."""
    flags = [*TINY]
    flags[flags.index("--steps") + 1] = "100000"
    argv = ["train", "--data", "ids.npy", "--out", "run", *flags, "--ckpt-interval", "100000"]

    def logging(proc) -> bool:  # a record past step 0 (the first can be step 0's, logged before any step)
        time.sleep(0.5)
        path = work / "run" / "metrics.jsonl"
        lines = path.read_text().splitlines() if path.is_file() else []
        return bool(lines) and lines[-1].endswith("}") and json.loads(lines[-1]).get("step", 0) > 0

    rc, err = _send(work, ":", argv, signal.SIGTERM, logging)
    assert rc == 143, err
    assert "Traceback" not in err
    assert [l for l in err.splitlines() if "stopped at step" in l], err
    step = json.loads((work / "run" / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert step > 0 and (work / "run" / "model.safetensors").is_file()


USAGE = [
    (["schedule", "--layers", "abc"], "Invalid value for '--layers'"),
    (["probe", "ck", "--data", "ids.npy", "--out", "out", "--no-such-flag"], "No such option: --no-such"),
    (["probe"], "Missing argument 'model'"),
    (["no-such-command"], "No such command 'no-such-command'"),
    (["--bogus"], "No such option: --bogus"),
]


@pytest.mark.parametrize("argv,needle", USAGE, ids=[" ".join(a) for a, _ in USAGE])
def test_usage_error_is_one_line_exit_2(work, argv, needle, monkeypatch):
    """Typer drew these as a multi-line box; the contract keeps exit code 2 for usage errors."""
    from typer.testing import CliRunner

    from cli import app

    monkeypatch.chdir(work)
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.output


def test_tlm_alone_still_prints_its_help():
    from typer.testing import CliRunner

    from cli import app

    r = CliRunner().invoke(app, [])
    assert "Usage:" in r.output and "probe" in r.output and len(r.output.splitlines()) > 10
