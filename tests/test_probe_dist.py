"""Data-parallel probing: two gloo processes under torchrun equal one process."""

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


def test_importance_two_gloo_ranks_equal_one_process(tmp_path):
    """Every importance statistic is all-reduced (sums, counts, Gram-like matrices) or refused (a reason)."""
    folder = build_model("gpt2", tmp_path / "gpt2")
    ids = np.random.default_rng(1).integers(0, 300, 7 * 24 + 5).astype(np.uint32)
    np.save(tmp_path / "ids.npy", ids)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    options = ["grad_sequences=5", "sample_size=64", "pool_size=16", "max_sequences=7"]
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        str(ROOT / "cli.py"), "probe", str(folder), "--data", str(tmp_path / "ids.npy"), "--out",
        str(tmp_path / "dist"), "--seq-len", "24", "--batch-size", "2", "--max-tokens", "0", "--stats", "all",
        "--threads", "1", "--json", *[a for o in options for a in ("--importance-option", o)],
    ]  # fmt: skip
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    dist, dist_m, prov = read_results(tmp_path / "dist")
    imp = dict(o.split("=") for o in options)
    res = probe(
        str(folder), str(tmp_path / "ids.npy"), stats="all", seq_len=24, batch_size=2, max_tokens=None,
        importance={k: int(v) for k, v in imp.items()}, full=True,
    )  # fmt: skip
    single = res.table
    skipped = prov["importance"]["skipped"]
    for name in ("probe_acc", "cka_linear", "effective_rank", "ablation_dnll_mlp_resample"):
        assert "torchrun" in skipped[name] and name not in set(dist.statistic)
    assert prov["importance"]["sequences"] == res.provenance["importance"]["sequences"] == 7
    merged = dist.merge(single, on=["layer", "statistic"], suffixes=("_d", "_s"))
    assert len(merged) == len(dist) and len(dist) > 60
    means = merged[
        merged.statistic.str.match(r"(logit_lens|ablation|fisher|align|block|mlp_inf|attn_inf|norm|resid)")
    ]
    assert {"logit_lens_kl", "ablation_dnll_mlp_zero", "ablation_dnll_mlp_mean", "fisher_mlp"} <= set(
        means.statistic
    )
    assert (means.n_tokens_d == means.n_tokens_s).all()
    for col in ("value", "ci_low", "ci_high", "std"):
        assert np.allclose(means[f"{col}_d"], means[f"{col}_s"], atol=1e-6, rtol=0, equal_nan=True), col
    assert np.allclose(merged.value_d, merged.value_s, atol=1e-6, rtol=1e-6, equal_nan=True)
    mm = dist_m.merge(res.matrices, on=["layer_i", "layer_j", "statistic"])
    # angular distances in [0, 1] from float32 representations; the ranks run 1 thread each, this process
    # may run more (other float32 sums): 8 float32 eps, as in tests/test_golden.py
    assert len(mm) == len(dist_m) and np.allclose(mm.value_x, mm.value_y, atol=8 * 1.2e-7, rtol=0)
