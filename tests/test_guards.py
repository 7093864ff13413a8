"""Issue 10 guards that are not a plain bad input: diverged training, a second writer, a full disk during
training, stale temporaries of a killed probe, Ctrl-C during a probe, plot skipping a model."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from cli import app
from tlm_probe.files import folder_lock
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.train import checkpoint

runner = CliRunner()
TINY = ["--threads", "1", "--multiple-of", "16", "--seq-len", "16", "--d-model", "32", "--layers", "2",
        "--heads", "2", "--d-ff", "64", "--eval-tokens", "64", "--batch-size", "2"]


@pytest.fixture
def ids(tmp_path) -> str:
    np.save(tmp_path / "ids.npy", np.arange(4096) % 64)
    return str(tmp_path / "ids.npy")


def _one_line_error(r) -> str:
    assert r.exit_code == 1, (r.exit_code, r.output, r.exception)
    lines = r.output.strip().splitlines()
    assert "Traceback" not in r.output and lines[-1].startswith("error: "), r.output
    return lines[-1]


def test_diverged_training_stops_exit_1_and_keeps_the_last_finite_checkpoint(tmp_path, ids):
    out = tmp_path / "run"
    r = runner.invoke(app, ["train", "--data", ids, "--out", str(out), *TINY, "--steps", "8", "--lr", "10",
                            "--warmup", "0", "--ckpt-interval", "1", "--eval-interval", "100"])
    err = _one_line_error(r)
    assert "training diverged at step" in err and "--lr" in err
    assert not (out / "run.json").exists()  # a diverged run is not a finished run
    folders = checkpoint.step_folders(out)
    assert folders and str(folders[-1]) in err
    for w in [out / "model.safetensors", *(f / "model.safetensors" for f in folders)]:
        assert all(torch.isfinite(t).all() for t in load_file(str(w)).values()), w
    kinds = [json.loads(line)["kind"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert kinds[-1] == "diverged"


def test_a_second_writer_gets_the_holders_pid(tmp_path, ids):
    out = tmp_path / "run"
    with folder_lock.folder_lock(out):
        lock = folder_lock.lock_path(out.absolute())
        lock_pid = os.getpid()
        with pytest.MonkeyPatch.context() as mp:  # the CLI runs in this process: make it forget the lock
            mp.setattr(folder_lock, "_held", {})
            r = runner.invoke(app, ["train", "--data", ids, "--out", str(out), *TINY, "--steps", "2"])
        assert lock.read_text().strip() == str(lock_pid)
    err = _one_line_error(r)
    assert f"being written by another tlm process (pid {lock_pid})" in err
    assert not out.exists()


def test_disk_full_during_training_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, ids, monkeypatch):
    real, calls = checkpoint._save_weights, []

    def fills_up(sd, path):
        calls.append(path)
        if len(calls) == 1:
            return real(sd, path)
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(checkpoint, "_save_weights", fills_up)
    out = tmp_path / "run"
    r = runner.invoke(app, ["train", "--data", ids, "--out", str(out), *TINY, "--steps", "2",
                            "--ckpt-interval", "1"])
    err = _one_line_error(r)
    assert "disk full writing" in err and "step_0000002" in err and "needs about" in err
    assert sorted(p.name for p in (out / "state").iterdir()) == ["step_0000001"]  # no partial temp left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ids.npy", "run"]  # no lock left either


class _FillsUp:
    """A file whose write gets half its bytes onto the disk, then reports a full disk."""

    def __init__(self, f):
        self.f = f

    def write(self, data):
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def test_disk_full_while_appending_metrics_leaves_no_torn_line(tmp_path, ids, monkeypatch):
    out, real_open, appends = tmp_path / "run", type(tmp_path).open, []

    def open_(path, mode="r", *a, **k):
        f = real_open(path, mode, *a, **k)
        if path.name == "metrics.jsonl" and "a" in mode:
            appends.append(path)
            return _FillsUp(f) if len(appends) == 3 else f
        return f

    monkeypatch.setattr(type(tmp_path), "open", open_)
    r = runner.invoke(app, ["train", "--data", ids, "--out", str(out), *TINY, "--steps", "4",
                            "--log-interval", "1", "--ckpt-interval", "1"])
    err = _one_line_error(r)
    assert "disk full writing" in err and "metrics.jsonl" in err
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all("step" in json.loads(ln) for ln in lines)  # whole lines only
    monkeypatch.undo()
    r = runner.invoke(app, ["train", "--data", ids, "--out", str(out), *TINY, "--steps", "4",
                            "--log-interval", "1", "--ckpt-interval", "1", "--resume"])
    assert r.exit_code == 0, r.output
    steps = [json.loads(ln)["step"] for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] == 4


def test_resume_drops_a_torn_last_metrics_line(tmp_path):
    from tlm_probe.train.metrics import MetricsLog

    log = MetricsLog(tmp_path)
    for step in (1, 2, 3):
        log.write({"kind": "train", "step": step, "loss": 1.0})
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"kind": "train", "st')  # kill -9 in the middle of a line
    log.truncate_after(2)
    assert [json.loads(ln)["step"] for ln in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]


@pytest.fixture
def tlm(tmp_path):
    torch.manual_seed(0)
    cfg = TLMConfig(vocab_size=64, d_model=16, n_layers=2, n_heads=2, d_ff=(48, 16), max_seq_len=32)
    return str(save_tlm(TaperedLM(cfg), tmp_path / "ck"))


def test_probe_removes_stale_temporaries_of_a_killed_run(tmp_path, tlm, ids):
    out = tmp_path / "res"
    dead = tmp_path / ".res.tmp-k1ll3d"  # what kill -9 during the write leaves
    dead.mkdir()
    (dead / "results.csv").write_text("half")
    r = runner.invoke(app, ["probe", tlm, "--data", ids, "--out", str(out), "--max-tokens", "64",
                            "--seq-len", "16", "--json"])
    assert r.exit_code == 0, r.output
    assert not dead.exists() and (out / "results.csv").is_file()
    assert not list(tmp_path.glob(".res*"))


def test_ctrl_c_during_probe_says_nothing_was_written(tmp_path, tlm, ids, monkeypatch):
    import tlm_probe.probe.engine

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(tlm_probe.probe.engine, "run_probe", interrupted)
    out = tmp_path / "res"
    r = runner.invoke(app, ["probe", tlm, "--data", ids, "--out", str(out)])
    assert r.exit_code == 130 and "Traceback" not in r.output
    assert r.output.strip() == f"interrupted; nothing written to {out}"
    assert not out.exists()


def test_plot_draws_what_exists_and_names_the_skipped_model(tmp_path):
    from tlm_probe.results import write_results

    row = dict(layer=[0, 1], depth=[0.0, 1.0], value=[0.1, 0.2], ci_low=[0.0, 0.1], ci_high=[0.2, 0.3],
               n_tokens=[10, 10], d_ff=[64, 64])
    for name, model, stat in (("a", "has", "align_mlp_mid"), ("b", "lacks", "block_influence")):
        write_results(tmp_path / name, pd.DataFrame({**row, "model": model, "statistic": stat}), None, {})
    a, b, fig = (str(tmp_path / n) for n in ("a", "b", "f.png"))
    r = runner.invoke(app, ["plot", a, b, "--out", fig, "--json"])
    assert r.exit_code == 0, r.output
    assert "note: skipped lacks: no align_mlp_mid in its results" in r.stderr
    assert json.loads(r.stdout)["notes"] == ["skipped lacks: no align_mlp_mid in its results"]
    assert (tmp_path / "f.png").stat().st_size > 0


def test_importance_figure_names_the_model_a_panel_leaves_out(tmp_path):
    from tlm_probe.results import write_results

    row = dict(layer=[0, 1], depth=[0.0, 1.0], value=[0.1, 0.2], ci_low=[0.0, 0.1], ci_high=[0.2, 0.3],
               n_tokens=[10, 10], d_ff=[64, 64])
    for name, model, stats in (("a", "both", ("taylor_mlp", "fisher_mlp")), ("b", "one", ("taylor_mlp",))):
        frames = [pd.DataFrame({**row, "model": model, "statistic": s}) for s in stats]
        write_results(tmp_path / name, pd.concat(frames, ignore_index=True), None, {})
    a, b, fig = (str(tmp_path / n) for n in ("a", "b", "f.png"))
    r = runner.invoke(app, ["plot", a, b, "--kind", "importance", "-s", "taylor_mlp", "-s", "fisher_mlp",
                            "--out", fig, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["notes"] == ["skipped one: no fisher_mlp in its results"]
