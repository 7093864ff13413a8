"""Progress in a log, a notebook and a terminal (issue 22): plain lines while a probe runs with stderr to a
pipe, one line per interval (not per batch), a last line with the whole loop's rate; an HTML <progress>
line updated in place in a notebook, without ipywidgets; other libraries' tqdm bars silenced in a log."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from tlm_probe import progress
from tlm_probe.progress import Ticker, tick


def test_log_lines_start_at_once_then_each_tenth_and_end_with_the_whole_rate(capsys, monkeypatch):
    clock = iter(float(t) for t in range(10_000))
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    with Ticker("probing", 1000, "tokens", mode="log") as bar:
        for _ in range(100):
            bar.advance(10)
    lines = capsys.readouterr().err.splitlines()
    # first advance at once, then every 100 tokens (a tenth; each advance takes 1 fake second < EVERY_S)
    counts = [int(m[1].replace(",", "")) for m in map(re.compile(r"probing: ([\d,]+)/1,000 tokens,").match,
                                                         lines[:-1])]
    assert counts == [10, 110, 210, 310, 410, 510, 610, 710, 810, 910]
    # the clock: __init__ 0, __enter__ 1, each of the 100 advances one tick (2..101), __exit__ 102
    assert lines[-1] == f"probing: 1,000/1,000 tokens in 101s, {1000 / 101:,.0f} tokens/s"
    assert "\r" not in "".join(lines)


def test_log_lines_every_interval_when_steps_are_slow(capsys, monkeypatch):
    clock = iter(float(t) for t in range(0, 10_000, 11))  # every call 11 s later: each advance is due
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    with Ticker("work", None, "windows", mode="log", announce=True) as bar:
        for _ in range(3):
            bar.advance(1)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["work: started", "work: 1 windows, 0/s".replace("0/s", f"{1 / 11:,.0f} windows/s"),
                     f"work: 2 windows, {2 / 22:,.0f} windows/s", f"work: 3 windows, {3 / 33:,.0f} windows/s",
                     f"work: 3 windows in 44s, {3 / 44:,.0f} windows/s"]


def test_disabled_and_iterable_forms(capsys):
    assert list(tick([1, 2, 3], "x", enabled=False)) == [1, 2, 3]
    with Ticker("quiet", 5, enabled=False) as bar:
        bar.advance(5)
    assert capsys.readouterr().err == ""


def test_notebook_shows_one_html_progress_line_updated_in_place(monkeypatch):
    import IPython.display as display

    shown, updates = [], []

    class Handle:
        def update(self, obj):
            updates.append(obj.data)

    def fake_display(obj, display_id=False):
        assert display_id is True  # one display, updated in place, not a new output per step
        shown.append(obj.data)
        return Handle()

    monkeypatch.setattr(display, "display", fake_display)
    clock = iter(float(t) for t in range(10_000))
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 'install ipywidgets' warning
        with Ticker("probing", 40, "tokens", mode="notebook") as bar:
            for _ in range(4):
                bar.advance(10)
    assert len(shown) == 1 and shown[0].startswith('<progress value="0" max="40">')
    assert updates and updates[-1].startswith('<progress value="40" max="40">')
    assert "40/40 tokens" in updates[-1]


QUIET_CHECK = ("import sys; {pre}from tqdm import tqdm\n"
               "for _ in tqdm(range(50), file=sys.stderr, mininterval=0): pass")


@pytest.mark.parametrize("quiet", [False, True])
def test_third_party_tqdm_is_silenced_in_a_log(quiet):
    env = {k: v for k, v in os.environ.items() if k not in progress.QUIET_ENV}
    pre = "from tlm_probe.progress import quiet_third_party_bars; quiet_third_party_bars(); " if quiet else ""
    res = subprocess.run([sys.executable, "-c", QUIET_CHECK.format(pre=pre)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    # the control: without it, tqdm draws its bar (in a pipe, one line per refresh)
    assert ("it/s" in res.stderr) is not quiet and (res.stderr == "") is quiet


def test_the_cli_silences_third_party_bars_when_stderr_is_not_a_terminal(monkeypatch):
    from typer.testing import CliRunner

    from cli import app

    for key in progress.QUIET_ENV:
        monkeypatch.delenv(key, raising=False)
    r = CliRunner().invoke(app, ["schedule", "--schedule", "uniform", "--layers", "4", "--d-ff", "64"])
    assert r.exit_code == 0, r.output
    assert all(os.environ.get(k) == v for k, v in progress.QUIET_ENV.items())


def test_probe_into_a_pipe_prints_progress_lines_while_it_runs(tmp_path):
    """`tlm probe` with stderr to a pipe: a 'probing' line comes while the process runs, no blank lines
    or carriage returns, and the last line says how many tokens and the whole loop's rate."""
    import torch

    from tlm_probe.models.config import config_with_schedule
    from tlm_probe.models.io import save_tlm
    from tlm_probe.models.tlm import TaperedLM
    from tlm_probe.schedules.widths import parse_schedule

    torch.manual_seed(0)
    cfg = config_with_schedule(parse_schedule("uniform", 16), 64, d_model=32, n_layers=2, n_heads=2,
                               vocab_size=256, max_seq_len=64)
    save_tlm(TaperedLM(cfg), tmp_path / "model")
    np.save(tmp_path / "ids.npy", np.random.default_rng(0).integers(0, 256, 8192).astype(np.uint32))
    args = [sys.executable, "-m", "tlm_probe", "probe", str(tmp_path / "model"), "--data",
            str(tmp_path / "ids.npy"), "--seq-len", "64", "--max-tokens", "4096", "--batch-size", "2",
            "--out", str(tmp_path / "out"), "--threads", "1"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, running_at_first = [], None
    deadline = time.monotonic() + 180  # generous: imports on a loaded 2-core machine take ~10 s
    for line in proc.stderr:
        lines.append(line.rstrip("\n"))
        if line.startswith("probing") and running_at_first is None:
            running_at_first = proc.poll() is None
        assert time.monotonic() < deadline, "probe did not finish in time"
    proc.communicate(timeout=60)
    assert proc.returncode == 0, "\n".join(lines)
    probing = [line for line in lines if line.startswith("probing")]
    assert running_at_first and re.fullmatch(r"probing: [\d,]+/4,096 tokens, [\d,]+ tokens/s, eta \d+s",
                                             probing[0]), lines
    assert re.fullmatch(r"probing: 4,096/4,096 tokens in \d+s, [\d,]+ tokens/s", probing[-1]), probing
    assert not any("\r" in line for line in lines) and "" not in lines, lines


def test_eval_in_a_log_prints_a_line_per_phase(tmp_path):
    """`tlm eval` with stderr not a terminal: its phases (harness tasks, each perplexity source) each say
    when they start and how long they took, instead of a spinner that a log never shows."""
    import torch
    from typer.testing import CliRunner

    from cli import app
    from tlm_probe.models.config import TLMConfig
    from tlm_probe.models.io import save_tlm
    from tlm_probe.models.tlm import TaperedLM
    from tlm_probe.tokenizer import ByteTokenizer

    torch.manual_seed(0)
    save_tlm(TaperedLM(TLMConfig(d_model=32, n_layers=2, n_heads=2, d_ff=(96, 32), max_seq_len=512)),
             tmp_path / "tiny")
    ByteTokenizer().save(tmp_path / "tiny")
    args = ["eval", str(tmp_path / "tiny"), "--tasks", "pydoc-lastword", "--ppl-data", "builtin:pydoc",
            "--ppl-tokens", "1024", "--limit", "3", "--out", str(tmp_path / "ev"), "--threads", "1"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    lines = res.stderr.splitlines()
    assert "eval: tasks pydoc-lastword: started" in lines
    assert any(re.fullmatch(r"eval: tasks pydoc-lastword: done in \d+s", line) for line in lines), lines
    assert any(re.fullmatch(r"eval: perplexity of builtin:pydoc: \d+ windows in \d+s, [\d,]+ windows/s", line)
               for line in lines), lines


def test_an_error_in_the_loop_leaves_one_line(capsys):
    with pytest.raises(ValueError), Ticker("probing", 100, "tokens", mode="log"):
        raise ValueError("bad input in the first batch")
    assert capsys.readouterr().err == ""


def test_training_in_a_notebook_draws_an_html_line_not_an_ipywidgets_warning(tmp_path, monkeypatch):
    import warnings

    import IPython.display as display

    from tlm_probe.train import training
    from tlm_probe.train.config import TrainConfig

    shown, updates = [], []

    class Handle:
        def update(self, obj):
            updates.append(obj.data)

    monkeypatch.setattr(display, "display", lambda obj, display_id=False: shown.append(obj.data) or Handle())
    monkeypatch.setattr(training._stderr, "is_jupyter", True)
    monkeypatch.setattr(progress, "NOTEBOOK_EVERY_S", 0.0)  # redraw at every step: the test sees each one
    tc = TrainConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64, multiple_of=16, seq_len=16, batch_size=2,
                     steps=6, eval_interval=1000, eval_tokens=64, threads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # rich's 'install "ipywidgets"' is a UserWarning
        training.run_training(tc, tmp_path / "run")
    assert len(shown) == 1 and shown[0].startswith('<progress value="0" max="6">')
    assert updates[-1].startswith('<progress value="6" max="6">') and "tok/s" in updates[-1]
    assert "loss " in updates[-1]
