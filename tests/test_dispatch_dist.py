"""Data parallelism over dispatched models (issue 34): `torchrun --nproc_per_node 2` of `tlm probe
--device-map auto --max-memory cpu=CAP`, CAP below the model's size, so that each gloo rank really offloads
blocks of its own copy to disk; the statistics equal a single-process, single-device run's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from models_zoo import build_model

from tlm_probe.api.library import probe
from tlm_probe.results import read_results

ROOT = Path(__file__).resolve().parents[1]
STATS = "alignment,ablation_dnll_mlp_zero,logit_lens_kl,dead_neuron_frac"
EPS32 = float(np.finfo(np.float32).eps)


def test_two_gloo_ranks_each_offloading_equal_one_device(tmp_path):
    folder = build_model("llama", tmp_path / "m")
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    ids = np.random.default_rng(2).integers(5, 100, 7 * 24 + 5).astype(np.uint32)  # 8 sequences, ragged end
    np.save(tmp_path / "ids.npy", ids)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        str(ROOT / "cli.py"), "probe", str(folder), "--data", str(tmp_path / "ids.npy"), "--out",
        str(tmp_path / "dist"), "--seq-len", "24", "--batch-size", "2", "--max-tokens", "0", "--stats", STATS,
        "--device-map", "auto", "--max-memory", f"cpu={int(weights * 0.6)}", "--threads", "1", "--json",
    ]  # fmt: skip
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    dist, _, prov = read_results(tmp_path / "dist")
    placed = prov["dispatch"]["placed"]
    assert placed.get("disk", 0) >= 1 and placed.get("cpu", 0) >= 1, placed  # a real dispatch on the ranks
    assert prov["world_size"] == 2 and prov["data"]["n_tokens"] == ids.size
    single = probe(str(folder), str(tmp_path / "ids.npy"), stats=STATS, seq_len=24, batch_size=2,
                   max_tokens=None, full=True).table
    key = ["layer", "statistic"]
    a, b = single.set_index(key), dist.set_index(key)
    assert sorted(a.index) == sorted(b.index)
    b = b.reindex(a.index)
    assert (a["n_tokens"] == b["n_tokens"]).all()
    # each rank sums its half of the tokens; the all-reduce adds two partial sums: a few float32 roundings
    # of each summand, the nats statistics scaling with ln V
    scale = np.maximum(1.0, np.abs(a["value"].to_numpy())) * np.log(100)
    assert np.all(np.abs(a["value"] - b["value"]).to_numpy() <= 16 * EPS32 * scale)
