"""Data-parallel probing: two gloo processes under torchrun equal one process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from models_zoo import build_model

from tlm_probe.probe import probe
from tlm_probe.report import read_results

ROOT = Path(__file__).resolve().parents[1]


def test_two_gloo_ranks_equal_one_process(tmp_path):
    folder = build_model("gpt2", tmp_path / "gpt2")
    ids = np.random.default_rng(0).integers(0, 300, 7 * 24 + 5).astype(np.uint32)  # 8 sequences, ragged end
    np.save(tmp_path / "ids.npy", ids)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(ROOT / "cli.py"),
        "probe",
        str(folder),
        "--data",
        str(tmp_path / "ids.npy"),
        "--out",
        str(tmp_path / "dist"),
        "--seq-len",
        "24",
        "--batch-size",
        "2",
        "--max-tokens",
        "0",
        "--json",
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    dist, _, prov = read_results(tmp_path / "dist")
    single = probe(str(folder), str(tmp_path / "ids.npy"), seq_len=24, batch_size=2, max_tokens=None)
    assert prov["world_size"] == 2 and prov["data"]["n_tokens"] == ids.size
    assert (dist.n_tokens == single.n_tokens).all()
    assert np.allclose(dist.value, single.value, atol=1e-6, rtol=0)
    assert np.allclose(dist.ci_low, single.ci_low, atol=1e-6, rtol=0)
    assert np.allclose(dist["std"], single["std"], atol=1e-6, rtol=0)
