"""Logs that never go silent (issue 35, item 3): every phase that can take a while says what it is doing,
in a terminal and in a log alike: loading the model (`tlm probe`, `tlm eval`, `tlm generate`), `tlm train`'s
first phase before its first step line, lm-eval's scoring, the demo's probes. No carriage-return frame of a
third-party bar and no "bootstrapping for stddev" note reaches the log.

A Phase speaks once it has run progress.ANNOUNCE_AFTER_S seconds (a quick load stays quiet, so a bad input
stays one error line); the commands below run with TLM_ANNOUNCE_AFTER_S=0, where every phase speaks, in a
subprocess whose stderr is a pipe (not a terminal)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from tiny_flags import TINY

from tlm_probe import progress
from tlm_probe.progress import Phase, no_tqdm_bars

ENV = {**os.environ, "TLM_ANNOUNCE_AFTER_S": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
TIMEOUT = 600  # a fresh process imports torch and transformers: slow on a loaded 2-core machine


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    from tlm_probe.models.config import TLMConfig
    from tlm_probe.models.io import save_tlm
    from tlm_probe.models.tlm import TaperedLM

    root = tmp_path_factory.mktemp("phases")
    torch.manual_seed(0)
    cfg = TLMConfig(vocab_size=256, d_model=32, n_layers=2, n_heads=2, d_ff=(96, 32), max_seq_len=512)
    ck = save_tlm(TaperedLM(cfg), root / "ck")
    (ck / "tlm_tokenizer.json").write_text('{"kind": "byte"}\n')
    np.save(root / "ids.npy", (np.arange(8192) % 256).astype(np.uint32))
    return root


def _tlm(work, *args, env=ENV) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "tlm_probe", *args], cwd=work, env=env, capture_output=True,
                         text=True, timeout=TIMEOUT)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "\r" not in res.stderr, res.stderr[-3000:]  # no tqdm or rich frame in a log
    return res


LOADED = r"loaded ck \(tlm, 2 layers\) in \d+\.\d s"

def _without_import_lines(lines: list[str]) -> list[str]:
    """stderr without the library-import phase, which a heavy command announces when importing torch and
    transformers takes longer than its first second (progress.importing_libraries)."""
    return [ln for ln in lines if not ln.startswith("importing torch and transformers")]



def test_probe_says_it_loads_the_model_then_probes(work):
    res = _tlm(work, "probe", "ck", "--data", "ids.npy", "--seq-len", "64", "--max-tokens", "1024",
               "--out", "out", "--threads", "1")
    lines = _without_import_lines(res.stderr.splitlines())
    assert lines[0] == "loading ck ..." and re.fullmatch(LOADED, lines[1]), lines
    assert lines[2].startswith("probing: ") and lines[-1].startswith("probing: 1,024/1,024 tokens in"), lines
    # with --json the phase lines stay on stderr: stdout is the JSON alone
    res = _tlm(work, "probe", "ck", "--data", "ids.npy", "--seq-len", "64", "--max-tokens", "512",
               "--out", "out-json", "--threads", "1", "--json")
    assert json.loads(res.stdout)["out"] == "out-json"
    assert "loading ck ..." in res.stderr.splitlines()


def test_train_says_its_first_phase_before_the_first_step(work):
    res = _tlm(work, "train", "--data", "ids.npy", "--out", "run", *TINY)
    lines = _without_import_lines(res.stderr.splitlines())
    first_step = next(k for k, line in enumerate(lines) if line.startswith("train step "))
    before = lines[:first_step]
    assert before[0] == "train: loading data ids.npy (tokenizer byte) ..."
    assert re.fullmatch(r"train: data ids\.npy: [\d,]+ training and [\d,]+ validation tokens in \d+\.\d s",
                        before[1]), before
    assert before[2].startswith("train: building the model (2 layers, d_model 32, MLP schedule uniform")
    assert re.fullmatch(r"train: model ready on cpu, step 0/2 in \d+\.\d s", before[3]), before
    assert before[4:] == ["train: validation at step 0 (64 tokens) ...", before[5]]
    assert re.fullmatch(r"train: validation at step 0: loss \d+\.\d{4} in \d+\.\d s", before[5]), before
    # the last validation and the checkpoint come before the run's last line
    assert lines[-1].startswith("train step 2/2:") and "(whole run)" in lines[-1]
    assert "train: validation at step 2 (64 tokens) ..." in lines[first_step:]


def test_a_quick_phase_is_quiet_by_default(work):
    """Without TLM_ANNOUNCE_AFTER_S a quick load says nothing (the libraries are imported before the load
    is timed): a bad input found right after the load stays one error line."""
    env = {k: v for k, v in ENV.items() if k != "TLM_ANNOUNCE_AFTER_S"}
    np.save(work / "objects.npy", np.array([{"a": 1}], dtype=object))
    res = subprocess.run([sys.executable, "-m", "tlm_probe", "probe", "ck", "--data", "objects.npy", "--out",
                          "o2"], cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert res.returncode == 1
    lines = _without_import_lines(res.stderr.strip().splitlines())
    assert len(lines) == 1 and lines[0].startswith("error: ") and "dtype object" in lines[0], lines


def test_eval_scoring_is_said_without_tqdm_frames_or_bootstrap_notes(work):
    res = _tlm(work, "eval", "ck", "--tasks", "pydoc-lastword,pydoc-mc", "--limit", "3", "--out", "ev",
               "--threads", "1")
    lines = _without_import_lines(res.stderr.splitlines())
    assert lines[:2] == ["loading ck ...", lines[1]] and re.fullmatch(LOADED, lines[1]), lines
    scoring = [line for line in lines if line.startswith("lm-eval: scoring")]
    assert re.fullmatch(r"lm-eval: scoring [\d,]+ loglikelihood requests: started", scoring[0]), lines
    assert re.fullmatch(r"lm-eval: scoring [\d,]+ loglikelihood requests: done in \d+s", scoring[1]), lines
    assert "Tokenizing inputs" not in res.stderr and "bootstrapping for stddev" not in res.stderr, lines
    assert "bootstrapping" not in res.stdout


def test_generate_says_it_loads_the_model(work):
    res = _tlm(work, "generate", "ck", "--prompt", "ab", "--max-new-tokens", "3", "--threads", "1")
    lines = _without_import_lines(res.stderr.splitlines())
    assert lines[0] == "loading ck ..." and re.fullmatch(LOADED, lines[1]), lines
    assert res.stdout.startswith("ab")


def test_the_demo_says_it_probes_each_model(tmp_path, capsys):
    from tlm_probe.workflows.demo import run_demo

    run_demo(tmp_path / "demo", quick=True, steps=2, threads=1)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    for name in ("uniform-s0", "cosine:1.5:0.5-s0"):
        k = lines.index(f"demo: probing {name} on the validation split (1,024 tokens)")
        assert lines[k + 1].startswith("probing: "), lines[k:k + 3]


def test_a_phase_speaks_only_when_slow(capsys):
    with Phase("quick", after_s=5.0) as phase:
        phase.result = "never said"
    assert capsys.readouterr().err == ""
    with Phase("loading slow", after_s=0.05) as phase:
        time.sleep(0.5)
        phase.result = "loaded slow (tlm, 2 layers)"
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "loading slow ..."
    assert re.fullmatch(r"loaded slow \(tlm, 2 layers\) in 0\.\d s", lines[1]), lines
    with pytest.raises(ValueError), Phase("failing", after_s=0.05):
        time.sleep(0.5)
        raise ValueError("bad input")
    assert capsys.readouterr().err == "failing ...\n"  # the error is its own line, said by the caller
    with Phase("off", enabled=False, after_s=0):
        pass
    with Phase("at once", after_s=0):
        pass
    assert capsys.readouterr().err.splitlines()[0] == "at once ..."


def test_no_tqdm_bars_even_when_tqdm_was_imported_first(monkeypatch):
    from tqdm import tqdm

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    drawn = io.StringIO()
    for _ in tqdm(range(3), file=drawn, mininterval=0):  # the control: a bar draws frames
        pass
    assert "\r" in drawn.getvalue()
    quiet = io.StringIO()
    with no_tqdm_bars():
        for _ in tqdm(range(3), file=quiet, mininterval=0):
            pass
    assert quiet.getvalue() == "" and "TQDM_DISABLE" not in os.environ
    after = io.StringIO()
    for _ in tqdm(range(3), file=after, mininterval=0):  # switched back after the block
        pass
    assert "\r" in after.getvalue()


def test_harness_prints_reach_stderr_less_the_bootstrap_notes():
    from tlm_probe.eval.harness import _HarnessPrints

    target = io.StringIO()
    prints = _HarnessPrints(target)
    print("bootstrapping for stddev:", "perplexity", file=prints)  # print() writes in pieces
    print("a harness warning", file=prints)
    prints.write("no newline at the end")
    prints.close()
    assert target.getvalue() == "a harness warning\nno newline at the end\n"


def test_announce_after_reads_the_environment(monkeypatch):
    monkeypatch.setenv("TLM_ANNOUNCE_AFTER_S", "0")
    assert progress.announce_after_s() == 0.0
    monkeypatch.setenv("TLM_ANNOUNCE_AFTER_S", "soon")
    assert progress.announce_after_s() == progress.ANNOUNCE_AFTER_S
    monkeypatch.delenv("TLM_ANNOUNCE_AFTER_S")
    assert progress.announce_after_s() == progress.ANNOUNCE_AFTER_S
