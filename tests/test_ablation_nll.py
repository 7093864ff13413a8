"""lse_nll (the ablation pass's chunked next-token NLL) against float64 cross-entropy, chunk edges in."""

import math

import pytest
import torch
import torch.nn.functional as F

from tlm_probe.importance import ablation_run
from tlm_probe.importance.ablation_run import lse_nll

EPS32 = 1.2e-7


@pytest.mark.parametrize("chunk", [None, 5 * 61])
def test_lse_nll_equals_float64_cross_entropy(monkeypatch, chunk):
    """float32 lse - z[next] against float64 cross_entropy: both sides of the subtraction are at most
    max|z| + log V, and the sum over V = 61 terms adds log2 V roundings: bound 8 x eps32 x (max|z| + log V)
    x log2 V. chunk: 5 positions per block, so blocks end inside a sequence and at T - 1."""
    if chunk:
        monkeypatch.setattr(ablation_run, "NLL_CHUNK", chunk)
    g = torch.Generator().manual_seed(0)
    B, T, V = 3, 13, 61
    logits = torch.randn(B, T, V, generator=g) * 6
    ids = torch.randint(0, V, (B, T), generator=g)
    want = F.cross_entropy(logits[:, :-1].double().reshape(-1, V), ids[:, 1:].reshape(-1), reduction="none")
    got = lse_nll(logits, ids)
    assert got.shape == (B, T - 1) and got.dtype == torch.float32
    tol = 8 * EPS32 * (logits.abs().max().item() + math.log(V)) * math.log2(V)
    assert (got.double() - want.view(B, T - 1)).abs().max().item() <= tol


def test_lse_nll_of_bfloat16_logits_is_computed_in_float32():
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(2, 6, 33, generator=g) * 4).bfloat16()
    ids = torch.randint(0, 33, (2, 6), generator=g)
    want = F.cross_entropy(logits[:, :-1].double().reshape(-1, 33), ids[:, 1:].reshape(-1), reduction="none")
    assert torch.allclose(lse_nll(logits, ids).double(), want.view(2, 5), atol=1e-5)
