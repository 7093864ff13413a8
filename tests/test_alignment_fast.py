"""The all-at-once alignment statistics equal the one-by-one formulas of STATISTICS bit for bit."""

import torch

from tlm_probe.stats import STATISTICS, LayerPieces, TokenIndex
from tlm_probe.stats.alignment_fast import FORMULAS, gram_values


def _pieces(dtype=torch.float32):
    torch.manual_seed(0)
    B, T, d = 3, 7, 16
    pre, attn, mlp = (torch.randn(B, T, d, dtype=dtype) for _ in range(3))
    mid = pre + attn
    raw = {"resid_pre": pre, "attn_out": attn, "resid_mid": mid, "mlp_out": mlp, "resid_post": mid + mlp}
    raw["attn_out"][0, 2] = 0  # a zero vector: cosine 0, not NaN, on both paths
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 4:] = 0
    return LayerPieces(0, raw, TokenIndex(mask, exclude_bos=True))


def test_same_values_as_the_statistics_table():
    assert set(FORMULAS) == set(STATISTICS)
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        p = _pieces(dtype)
        names = tuple(STATISTICS)
        fast = gram_values(p, names)
        slow = torch.stack([STATISTICS[s][1](p) for s in names], dim=1)
        assert fast.dtype == torch.float64 and torch.equal(fast, slow)
        assert torch.equal(gram_values(p, ("mlp_influence",)), slow[:, [names.index("mlp_influence")]])


def test_independent_float64_recomputation():
    p = _pieces(torch.float64)
    v = gram_values(p, ("align_mlp_mid", "resid_norm_growth", "block_influence"))
    sel = {k: p.index.select(x) for k, x in p.raw.items()}
    cos = torch.nn.functional.cosine_similarity
    torch.testing.assert_close(v[:, 0], cos(sel["mlp_out"], sel["resid_mid"], dim=-1), rtol=1e-12, atol=1e-12)
    ratio = sel["resid_post"].norm(dim=-1) / sel["resid_pre"].norm(dim=-1)
    torch.testing.assert_close(v[:, 1], ratio, rtol=1e-12, atol=1e-12)
    influence = 1 - cos(sel["resid_pre"], sel["resid_post"], dim=-1)
    torch.testing.assert_close(v[:, 2], influence, rtol=1e-9, atol=1e-12)


def test_unknown_statistic_falls_back():
    assert gram_values(_pieces(), ("align_mlp_mid", "not_a_gram_formula")) is None
