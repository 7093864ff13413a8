"""Honest provenance (issue 22): the probe records the threads it ran with, a hash of the exact token ids it
probed and the commit of the code; eval too; the demo's probes name their data (source and split) instead
of 'ndarray'/'all'; a figure's title names the data split and a mix of splits is warned of; eval task
configs name their data file relative to themselves, so the folder can move."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from cli import app
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.plotting import plot_depth, plot_importance
from tlm_probe.plotting.inputs import merge_probes, split_note
from tlm_probe.results import ProbeResult
from tlm_probe.tokenizer import ByteTokenizer

REPO = Path(__file__).resolve().parents[1]


def _head() -> str | None:
    """The commit by git itself (the code under test reads .git files instead)."""
    try:
        res = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=30)
    except OSError:
        return None
    return res.stdout.strip() if res.returncode == 0 else None


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prov") / "tiny"
    torch.manual_seed(0)
    save_tlm(TaperedLM(TLMConfig(d_model=32, n_layers=2, n_heads=2, d_ff=(96, 32), max_seq_len=512)), folder)
    ByteTokenizer().save(folder)
    return folder


def test_probe_records_threads_data_hash_and_commit(tiny, tmp_path):
    ids = np.random.default_rng(0).integers(0, 256, 3000).astype(np.uint32)
    np.save(tmp_path / "ids.npy", ids)
    out = tmp_path / "probe"
    r = CliRunner().invoke(app, ["probe", str(tiny), "--data", str(tmp_path / "ids.npy"), "--seq-len", "64",
                                 "--max-tokens", "1000", "--out", str(out), "--threads", "1"])
    assert r.exit_code == 0, r.output
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["threads"] == 1
    # the hash, computed here from the ids: 1000 tokens = 15 sequences of 64 and one of 40, each as
    # int64 little-endian bytes followed by its length
    digest = hashlib.sha256()
    for start in range(0, 1000, 64):
        seq = ids[start:min(start + 64, 1000)].astype("<i8")
        digest.update(seq.tobytes() + len(seq).to_bytes(8, "little"))
    assert prov["data"]["sha256"] == digest.hexdigest() and prov["data"]["n_tokens"] == 1000
    head = _head()
    if head is None:
        pytest.skip("not a git checkout: no commit to compare with")
    assert prov["versions"]["tlm_probe_commit"] == head


def test_eval_records_threads_and_commit_and_its_task_folder_can_move(tiny, tmp_path):
    out = tmp_path / "ev"
    r = CliRunner().invoke(app, ["eval", str(tiny), "--tasks", "pydoc-lastword", "--limit", "3", "--out",
                                 str(out), "--threads", "1", "--json"])
    assert r.exit_code == 0, r.output
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["threads"] == 1
    if _head() is not None:
        assert prov["versions"]["tlm_probe_commit"] == _head()
    moved = tmp_path / "elsewhere" / "ev"
    shutil.move(out, moved)
    import yaml

    config = yaml.safe_load((moved / "tasks" / "pydoc-lastword.yaml").read_text())
    data = moved / "tasks" / config["dataset_kwargs"]["data_files"]["test"]
    assert data.is_file() and not Path(config["dataset_kwargs"]["data_files"]["test"]).is_absolute()
    assert len(data.read_text().splitlines()) == json.loads(json.dumps(prov["tasks"]))[0]["n_docs"]


def _table(model: str) -> pd.DataFrame:
    rows = [dict(model=model, layer=l, depth=l / 3, statistic="block_influence", value=0.1 * l, ci_low=0.0,
                 ci_high=0.5, n_tokens=100, d_ff=64) for l in range(4)]
    return pd.DataFrame(rows)


def test_figure_titles_name_the_split_and_a_mix_is_warned_of(tmp_path):
    val = ProbeResult(_table("a"), None, {"data": {"split": "val"}}, tmp_path / "a")
    also_val = ProbeResult(_table("b"), None, {"data": {"split": "val"}}, tmp_path / "b")
    mixed = ProbeResult(_table("c"), None, {"data": {"split": "all"}}, tmp_path / "c")
    same, _ = merge_probes([val, also_val])
    assert split_note(same) == []
    assert ", data split val" in plot_depth(same, "block_influence").axes[0].get_title()
    both, _ = merge_probes([val, mixed])
    assert split_note(both) == ["warning: these probes ran on different data splits (all: c; val: a); "
                                "their values are not measurements on the same tokens"]
    assert "MIXED data splits all, val" in plot_depth(both, "block_influence").axes[0].get_title()
    assert "MIXED data splits all, val" in plot_importance(both, ["block_influence"]).get_suptitle()


def test_plot_cli_prints_the_mixed_split_warning(tmp_path):
    from tlm_probe.results import write_results

    for name, split in (("a", "val"), ("c", "all")):
        write_results(tmp_path / name, _table(name), None, {"data": {"split": split}})
    r = CliRunner().invoke(app, ["plot", str(tmp_path / "a"), str(tmp_path / "c"), "--statistic",
                                 "block_influence", "--out", str(tmp_path / "f.png")])
    assert r.exit_code == 0, r.output
    assert "different data splits" in r.output


def test_demo_probes_name_their_data(real_demo_dir):
    for folder in sorted((real_demo_dir / "probe").iterdir()):
        data = json.loads((folder / "provenance.json").read_text())["data"]
        assert data["source"] == "builtin:pydoc" and data["split"] == "val", data
        assert len(data["sha256"]) == 64


def test_a_training_run_records_its_code_packages_and_arithmetic(tmp_path):
    """run.json names what a bit-for-bit re-run needs: the commit, the packages, the CPU and the instruction
    set torch's CPU kernels use (study 1's runs recorded none of it, and a re-train on this machine parted
    from them at step 30: analyses/results/confirm/rescore/check_*.json)."""
    import platform

    np.save(tmp_path / "ids.npy", np.random.default_rng(0).integers(0, 256, 4000).astype(np.uint32))
    args = ["train", "--data", str(tmp_path / "ids.npy"), "--steps", "2", "--threads", "1",
            "--multiple-of", "16", "--seq-len", "16", "--d-model", "32", "--layers", "2", "--heads", "2",
            "--d-ff", "32", "--batch-size", "2", "--eval-tokens", "64", "--out", str(tmp_path / "run")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["versions"]["torch"] == torch.__version__ and run["versions"]["numpy"] == np.__version__
    assert run["versions"]["python"] == platform.python_version()
    if _head() is not None:
        assert run["versions"]["tlm_probe_commit"] == _head()
    m = run["machine"]
    assert m["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and m["threads"] == 1
    assert m["arch"] == platform.machine() and m["cpu"] and m["accelerator"] is None
    docs = (REPO / "docs" / "reference" / "files.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `run.json` |"))
    assert set(run) == set(row.split("`")[3].split(", ")), "files.md's run.json keys"
    r = CliRunner().invoke(app, ["info", str(tmp_path / "run")], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    line = r.stdout.strip().splitlines()[-1]  # tlm info says how and where the run was trained
    assert line.startswith("trained 2 steps, 64 tokens, validation loss ")
    assert f"torch {torch.__version__}" in line
    assert f"on {m['cpu']} ({m['cpu_capability']}), 1 thread(s)" in line
    info = json.loads(CliRunner().invoke(app, ["info", str(tmp_path / "run"), "--json"]).stdout)
    assert info["run"] == run


def test_the_recorded_instruction_set_is_the_one_torch_runs_with():
    """ATEN_CPU_CAPABILITY=default makes torch use its plain kernels; the record says so (asked of torch in
    a fresh process, where the variable takes effect)."""
    code = "import json; from tlm_probe.environment import machine; print(json.dumps(machine()))"
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=120, check=True).stdout
    assert json.loads(out)["cpu_capability"] == "DEFAULT"
