"""Per-call fixed costs of probe(): a token file is read once (its row length and its sequences came from
two full reads of it); the CI's t quantile is cached and still scipy's."""

import numpy as np
import pytest
from models_zoo import build_model
from scipy import stats as sps

import tlm_probe.data.sequences as tokens  # where the probe reads a token file (load_token_rows)
from tlm_probe.api.library import probe
from tlm_probe.capture import load_probe_model
from tlm_probe.stats import moments


def test_a_token_file_is_read_once_per_probe(tmp_path, monkeypatch):
    pm = load_probe_model(build_model("gpt2", tmp_path / "gpt2"))
    ids = np.random.default_rng(0).integers(0, pm.vocab_size, (4, 16)).astype(np.uint32)
    np.save(tmp_path / "ids.npy", ids)
    reads = []
    real = tokens.load_token_rows

    def counting(*a, **k):
        reads.append(a[0])
        return real(*a, **k)

    monkeypatch.setattr(tokens, "load_token_rows", counting)
    df = probe(pm, str(tmp_path / "ids.npy"), stats="align_mlp_mid", max_tokens=None)
    assert len(reads) == 1
    assert int(df.n_tokens.max()) == ids.size  # the rows (16 tokens each) are still the sequences


def test_cached_t_quantile_is_scipys():
    for df in (1, 2, 7, 511):
        assert moments._t975(df) == pytest.approx(float(sps.t.ppf(0.975, df)), rel=1e-15)


def test_token_nll_is_next_token_nll_with_its_gradient():
    import torch

    from tlm_probe.importance.ablation_run import token_nll
    from tlm_probe.models.tlm import next_token_nll

    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(2, 7, 19, generator=g) * 3).requires_grad_(True)
    ids = torch.randint(0, 19, (2, 7), generator=g)
    a, b = token_nll(logits, ids), next_token_nll(logits, ids, reduction="none")
    assert torch.equal(a, b)  # the same cross_entropy call on the same float32 values
    ga = torch.autograd.grad(a.sum(), logits)[0]
    gb = torch.autograd.grad(b.sum(), logits)[0]
    assert torch.equal(ga, gb)


PROBE_HF = """
import sys
import numpy as np
from tlm_probe.capture import load_probe_model
from tlm_probe.api.library import probe
pm = load_probe_model(sys.argv[1])
ids = np.random.default_rng(0).integers(0, pm.vocab_size, (2, 16)).astype(np.uint32)
probe(pm, ids, stats="all", max_tokens=None, importance={"grad_sequences": 1, "sample_size": 8})
print("transformer_lens" in sys.modules)
"""


def test_probing_a_hugging_face_model_never_imports_transformer_lens(tmp_path):
    """Importing transformer_lens took seconds of every probe's start-up (7 s of 16 s under load here);
    only our own checkpoints (models/tlm.py) and the transformer-lens backend need it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    folder = build_model("llama", tmp_path / "llama")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", PROBE_HF, str(folder)], capture_output=True, text=True,
                         cwd=root, env=env, check=True)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "False"
