"""All alignment statistics of a layer from its Gram matrix in a few tensor operations.

Each statistic of stats.alignment.STATISTICS is a cosine, one minus a cosine, or a ratio of norms of two
pieces. Evaluating them one by one costs ~60 small operations per layer, which on narrow models (64-384
wide) is a visible share of the forward pass; here every selected statistic is gathered at once from the
per-token Gram matrix. The arithmetic per value is the same as the one-by-one formulas (dot / clamp(|a||b|),
-cos + 1 == 1 - cos exactly, |a| / clamp(|b|)), so the values are bitwise equal; a test checks it.
"""

from __future__ import annotations

import torch

from tlm_probe.stats.pieces import LayerPieces

# name -> (kind, a, b): cos = cos(a, b), 1-cos = 1 - cos(a, b), ratio = |a| / |b|
FORMULAS = {
    "align_mlp_mid": ("cos", "mlp_out", "resid_mid"),
    "align_mlp_pre": ("cos", "mlp_out", "resid_pre"),
    "align_attn_pre": ("cos", "attn_out", "resid_pre"),
    "norm_ratio_mlp": ("ratio", "mlp_out", "resid_mid"),
    "block_influence": ("1-cos", "resid_pre", "resid_post"),
    "mlp_influence": ("1-cos", "resid_mid", "resid_post"),
    "attn_influence": ("1-cos", "resid_pre", "resid_mid"),
    "resid_norm_growth": ("ratio", "resid_post", "resid_pre"),
}
# kind -> (scale, offset) applied to the cosine; ratios are selected separately
_AFFINE = {"cos": (1.0, 0.0), "1-cos": (-1.0, 1.0), "ratio": (1.0, 0.0)}


def gram_values(pieces: LayerPieces, statistics: tuple[str, ...]) -> torch.Tensor | None:
    """(n, len(statistics)) float64, or None when a statistic is not a Gram formula (then go one by one)."""
    if any(s not in FORMULAS for s in statistics):
        return None
    g = pieces.gram()  # (n, k, k)
    slot = pieces._slot
    specs = [FORMULAS[s] for s in statistics]
    if any(a not in slot or b not in slot for _, a, b in specs):
        return None
    ia = torch.tensor([slot[a] for _, a, _ in specs], device=g.device)
    ib = torch.tensor([slot[b] for _, _, b in specs], device=g.device)
    norms = g.diagonal(dim1=1, dim2=2).sqrt()  # (n, k)
    na, nb = norms[:, ia], norms[:, ib]
    cos = g[:, ia, ib] / (na * nb).clamp_min(1e-300)
    scale = torch.tensor([_AFFINE[k][0] for k, _, _ in specs], dtype=g.dtype, device=g.device)
    offset = torch.tensor([_AFFINE[k][1] for k, _, _ in specs], dtype=g.dtype, device=g.device)
    is_ratio = torch.tensor([k == "ratio" for k, _, _ in specs], device=g.device)
    return torch.where(is_ratio, na / nb.clamp_min(1e-300), cos * scale + offset)
