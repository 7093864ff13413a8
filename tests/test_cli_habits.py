"""Habits of the ecosystem: `tlm --version`, `python -m tlm_probe`, generation that slides its context window
near the model's limit, and plain progress lines when stderr is a log, not a terminal."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import transformers
from typer.testing import CliRunner

import tlm_probe
from cli import app

runner = CliRunner()


def test_version_names_the_three_versions():
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0, res.output
    line = res.stdout.strip()
    want = (f"tlm_probe {tlm_probe.__version__}", f"torch {torch.__version__}",
            f"transformers {transformers.__version__}")
    assert all(w in line for w in want), line


def test_python_dash_m_runs_the_same_program():
    """A fresh interpreter: `python -m tlm_probe` is cli.main (the version line and a command's output)."""
    out = subprocess.run([sys.executable, "-m", "tlm_probe", "--version"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.strip() == runner.invoke(app, ["--version"]).stdout.strip()
    args = ["schedule", "--layers", "4", "--d-ff", "64", "--schedule", "uniform", "--json"]
    sub = subprocess.run([sys.executable, "-m", "tlm_probe", *args], capture_output=True, text=True)
    assert sub.returncode == 0, sub.stderr[-500:]
    assert sub.stdout == runner.invoke(app, args).stdout


def _tiny_lm(mixer: str = "attention", positions: str = "rope", context: int = 16):
    from tlm_probe.models.config import TLMConfig
    from tlm_probe.models.hf import TLMForCausalLM, TLMHFConfig

    torch.manual_seed(0)
    cfg = TLMConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=(96, 32),
                    max_seq_len=context, init_scale=0.3, mixer=mixer, positions=positions)
    return TLMForCausalLM(TLMHFConfig(**cfg.to_dict())).eval()


def _sliding_reference(model, prompt: list[int], n: int, context: int) -> list[int]:
    """Greedy decoding that recomputes each step with TaperedLM.forward on the last `context` ids."""
    from tlm_probe.models.tlm import TaperedLM

    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(TaperedLM.forward(model, torch.tensor([ids[-context:]]))[0, -1].argmax()))
    return ids[len(prompt):]


@pytest.mark.parametrize("mixer, positions, use_cache, prompt_len",
                         [("attention", "rope", True, 6), ("attention", "rope", False, 6),
                          ("gated_attention", "learned", True, 20), ("titans", "rope", True, 6)])
def test_generation_slides_the_window_near_the_context_limit(mixer, positions, use_cache, prompt_len):
    """A 16-token model asked for 30 new ids: every id is the argmax over the last 16 tokens. Before, the
    prompt was cut to one token and only 15 ids came back. Learned positions and a prompt longer than the
    context check the window restarts its positions; titans checks a mixer without a KV cache."""
    from tlm_probe.generation import GenerateOptions, generate_ids, window_note

    model = _tiny_lm(mixer, positions)
    prompt = [(7 * i + 3) % 49 for i in range(prompt_len)]
    opts = GenerateOptions(max_new_tokens=30, cache=use_cache)
    ref = _sliding_reference(model, prompt, 30, 16)
    eos = min(set(range(50)) - set(ref))  # an end-of-text id the model never emits: all 30 ids come back
    got = generate_ids(model, prompt, opts, eos_id=eos, context=16)
    assert got == ref
    assert len(set(got)) > 3, "degenerate model: the test would not see a difference"
    assert window_note(prompt_len, len(got), 16) is not None and window_note(6, 11, 16) is None


def test_cli_generate_says_once_that_the_window_slid(tmp_path):
    from tlm_probe.models.config import TLMConfig
    from tlm_probe.models.hf import TLMForCausalLM, TLMHFConfig
    from tlm_probe.tokenizer import ByteTokenizer

    torch.manual_seed(0)
    model = TLMForCausalLM(TLMHFConfig(**TLMConfig(d_model=32, n_layers=2, n_heads=2, d_ff=(64, 64),
                                                   max_seq_len=32).to_dict()))
    folder = tmp_path / "run"
    model.save_pretrained(folder)
    ByteTokenizer().save(folder)
    args = ["generate", str(folder), "--prompt", "def ", "--max-new-tokens", "40", "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    prompt = ByteTokenizer().encode("def ").tolist()
    ref = _sliding_reference(model.eval(), prompt, 40, 32)
    eos = ByteTokenizer().eos_id
    assert doc["ids"] == (ref[: ref.index(eos) + 1] if eos in ref else ref)
    notes = [line for line in res.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "context of 32" in notes[0], res.stderr


def test_training_into_a_pipe_prints_progress_lines_while_it_runs(tmp_path):
    """stderr is a pipe (a log, a batch job): plain `step N/M` lines come while training runs, not one bar
    at the end; the last line's tok/s is the summary's end-to-end rate, not the last step's."""
    import re
    import time

    text = "\n\n".join(f"paragraph {i}: the tapered model reads word {i * 7 % 13} twice" for i in range(200))
    (tmp_path / "corpus.txt").write_text(text)
    total = 200
    args = [sys.executable, "-m", "tlm_probe", "train", "--out", str(tmp_path / "run"), "--data",
            str(tmp_path / "corpus.txt"), "--steps", str(total), "--threads", "1", "--multiple-of", "16",
            "--seq-len", "16", "--d-model", "32", "--layers", "2", "--heads", "2", "--d-ff", "64",
            "--eval-tokens", "64", "--batch-size", "2", "--eval-interval", "1000", "--json"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    step_line = re.compile(r"^train step (\d+)/(\d+): loss [\d.]+, tok/s ([\d,]+)")
    lines, running_at_first = [], None
    deadline = time.monotonic() + 120  # generous: imports on a loaded 2-core machine take ~10 s
    for line in proc.stderr:
        if step_line.match(line):
            lines.append(line.strip())
            if running_at_first is None:
                running_at_first = proc.poll() is None
        assert time.monotonic() < deadline, "training did not finish in time"
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert lines and running_at_first, lines
    first = step_line.match(lines[0])
    assert int(first[1]) < total and int(first[2]) == total  # a line before the end, not only the final one
    assert len(lines) >= 3 and lines[-1].endswith("s") and "(whole run)" in lines[-1]
    summary = json.loads(out)
    assert step_line.match(lines[-1])[3] == f"{summary['end_to_end_tokens_per_s']:,.0f}"
