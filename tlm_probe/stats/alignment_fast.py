"""All alignment statistics of a layer from its Gram matrix in a few tensor operations.

Each statistic of stats.alignment.STATISTICS is a cosine, one minus a cosine, or a ratio of norms of two
pieces. Evaluating them one by one costs ~60 small operations per layer, which on narrow models (64-384
wide) is a visible share of the forward pass; here every selected statistic is gathered at once from the
per-token Gram matrix. The arithmetic per value is the same as the one-by-one formulas (dot / clamp(|a||b|),
-cos + 1 == 1 - cos exactly, |a| / clamp(|b|)), so the values are bitwise equal; a test checks it.
"""

from __future__ import annotations

import functools

import torch

from tlm_probe.stats.pieces import LayerPieces

# name -> (kind, a, b): cos = cos(a, b), |cos| = |cos(a, b)|, 1-cos = 1 - cos(a, b), ratio = |a| / |b|
FORMULAS = {
    "align_mlp_mid": ("cos", "mlp_out", "resid_mid"),
    "align_mlp_pre": ("cos", "mlp_out", "resid_pre"),
    "align_abs_mlp_mid": ("|cos|", "mlp_out", "resid_mid"),
    "align_abs_mlp_pre": ("|cos|", "mlp_out", "resid_pre"),
    "align_attn_pre": ("cos", "attn_out", "resid_pre"),
    "norm_ratio_mlp": ("ratio", "mlp_out", "resid_mid"),
    "block_influence": ("1-cos", "resid_pre", "resid_post"),
    "mlp_influence": ("1-cos", "resid_mid", "resid_post"),
    "attn_influence": ("1-cos", "resid_pre", "resid_mid"),
    "resid_norm_growth": ("ratio", "resid_post", "resid_pre"),
}
# kind -> (scale, offset) applied to the cosine; ratios are selected separately
_AFFINE = {"cos": (1.0, 0.0), "|cos|": (1.0, 0.0), "1-cos": (-1.0, 1.0), "ratio": (1.0, 0.0)}


def gram_values(pieces: LayerPieces, statistics: tuple[str, ...]) -> torch.Tensor | None:
    """(n, len(statistics)) float64, or None when a statistic is not a Gram formula (then go one by one)."""
    if any(s not in FORMULAS for s in statistics):
        return None
    g = pieces.gram()  # (n, k, k)
    plan = _plan(statistics, tuple(pieces._slot.items()), g.shape[-1], g.device)
    if plan is None:
        return None
    pairs, diag_a, diag_b, scale, offset, is_ratio, is_abs = plan
    flat = g.reshape(g.shape[0], -1)  # (n, k*k): one index_select per gather instead of 2-d fancy indexing
    na, nb = flat.index_select(1, diag_a).sqrt(), flat.index_select(1, diag_b).sqrt()
    cos = flat.index_select(1, pairs) / (na * nb).clamp_min(1e-300)
    cos = torch.where(is_abs, cos.abs(), cos)
    return torch.where(is_ratio, na / nb.clamp_min(1e-300), cos * scale + offset)


@functools.lru_cache(maxsize=64)
def _plan(statistics: tuple[str, ...], slots: tuple, k: int, device: torch.device):
    """Index tensors into the flattened Gram, built once per (statistics, pieces) combination."""
    slot = dict(slots)
    specs = [FORMULAS[s] for s in statistics]
    if any(a not in slot or b not in slot for _, a, b in specs):
        return None
    ia = [slot[a] for _, a, _ in specs]
    ib = [slot[b] for _, _, b in specs]
    idx = lambda values: torch.tensor(values, device=device)  # noqa: E731
    return (
        idx([a * k + b for a, b in zip(ia, ib, strict=True)]),
        idx([a * k + a for a in ia]),
        idx([b * k + b for b in ib]),
        torch.tensor([_AFFINE[kind][0] for kind, _, _ in specs], dtype=torch.float64, device=device),
        torch.tensor([_AFFINE[kind][1] for kind, _, _ in specs], dtype=torch.float64, device=device),
        idx([kind == "ratio" for kind, _, _ in specs]),
        idx([kind == "|cos|" for kind, _, _ in specs]),
    )
