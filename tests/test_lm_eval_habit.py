"""The lm-eval habit (issue 35): `python -m tlm_probe.lm_eval --model hf --model_args pretrained=RUN` runs
the harness's own command line on a tlm run folder (in a fresh process, offline, on a built-in task)."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from tlm_probe.eval.builtin_tasks import write_task
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.tokenizer import ByteTokenizer


def test_lm_eval_command_line_reads_a_tlm_run(tmp_path):
    torch.manual_seed(0)
    run = tmp_path / "run"
    save_tlm(TaperedLM(TLMConfig(vocab_size=256, d_model=32, n_layers=2, n_heads=4, d_ff=(64, 32),
                                 max_seq_len=256)).eval(), run)
    ByteTokenizer().save(run)
    write_task("pydoc-lastword", tmp_path / "tasks")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    args = ["--model", "hf", "--model_args", f"pretrained={run},dtype=float32", "--tasks", "pydoc-lastword",
            "--include_path", str(tmp_path / "tasks"), "--limit", "3", "--device", "cpu", "--batch_size", "1"]
    res = subprocess.run([sys.executable, "-m", "tlm_probe.lm_eval", *args], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "pydoc-lastword" in res.stdout and "perplexity" in res.stdout
