"""The all-at-once alignment statistics equal the one-by-one formulas of PER_TOKEN bit for bit."""

import torch

from tlm_probe.stats.alignment import PER_TOKEN
from tlm_probe.stats.alignment_fast import FORMULAS, layer_values, plan
from tlm_probe.stats.pieces import LayerPieces, TokenIndex


def _pieces(dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    B, T, d = 3, 7, 16
    pre, attn, mlp = (torch.randn(B, T, d, dtype=dtype) for _ in range(3))
    mid = pre + attn
    raw = {"resid_pre": pre, "attn_out": attn, "resid_mid": mid, "mlp_out": mlp, "resid_post": mid + mlp}
    raw["attn_out"][0, 2] = 0  # a zero vector: cosine 0, not NaN, on both paths
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 4:] = 0
    return LayerPieces(0, raw, TokenIndex(mask, exclude_bos=True))


def _fast(layers, names):
    """(n, L * S): column l * S + i is statistic i at layer l, put back in order from layer_values' rows."""
    p = plan(names)
    values, where = layer_values(torch.cat([q.dots(p.pairs) for q in layers]), p)
    out = torch.empty_like(values)
    out[where[:, 0] * len(names) + where[:, 1]] = values
    return out.T


def test_same_values_as_the_statistics_table():
    assert set(FORMULAS) == set(PER_TOKEN)
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        layers = [_pieces(dtype, seed) for seed in range(3)]
        names = tuple(PER_TOKEN)
        fast = _fast(layers, names)
        slow = torch.cat([torch.stack([PER_TOKEN[s][1](q) for s in names], dim=1) for q in layers], dim=1)
        assert fast.dtype == torch.float64 and torch.equal(fast, slow)
        for name in names:  # alone, each statistic reads only its own pairs
            one = _fast(layers[1:2], (name,))
            assert torch.equal(one, slow[:, [len(names) + names.index(name)]]), name


def test_only_the_needed_pairs():
    p = plan(("align_mlp_mid", "block_influence", "norm_ratio_mlp"))
    squares = [(x, x) for x in ("mlp_out", "resid_mid", "resid_post", "resid_pre")]
    assert p.pairs == (*squares, ("mlp_out", "resid_mid"), ("resid_pre", "resid_post"))
    assert plan(("resid_norm_growth",)).pairs == (("resid_post", "resid_post"), ("resid_pre", "resid_pre"))


def test_independent_float64_recomputation():
    p = _pieces(torch.float64)
    v = _fast([p], ("align_mlp_mid", "resid_norm_growth", "block_influence"))
    sel = {k: x[p.index.counted] for k, x in p.raw.items()}  # (n, d): counted tokens in row-major order
    cos = torch.nn.functional.cosine_similarity
    torch.testing.assert_close(v[:, 0], cos(sel["mlp_out"], sel["resid_mid"], dim=-1), rtol=1e-12, atol=1e-12)
    ratio = sel["resid_post"].norm(dim=-1) / sel["resid_pre"].norm(dim=-1)
    torch.testing.assert_close(v[:, 1], ratio, rtol=1e-12, atol=1e-12)
    influence = 1 - cos(sel["resid_pre"], sel["resid_post"], dim=-1)
    torch.testing.assert_close(v[:, 2], influence, rtol=1e-9, atol=1e-12)


def test_per_sequence_sums_with_and_without_padding():
    torch.manual_seed(1)
    for mask, exclude_bos in [(torch.ones(3, 5), False), (torch.ones(3, 5), True),
                              (torch.tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]), True)]:
        index = TokenIndex(mask.long(), exclude_bos)
        values = torch.randn(4, len(index.seq), dtype=torch.float64)
        want = torch.stack([values[:, index.seq == b].sum(1) for b in range(3)], dim=1)
        torch.testing.assert_close(index.per_sequence(values), want, rtol=1e-15, atol=1e-15)
