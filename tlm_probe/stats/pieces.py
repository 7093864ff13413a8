"""The per-layer input of every statistic: the captured pieces of one layer for one batch.

Only counted tokens are kept (padding removed, position 0 removed with exclude_bos), flattened to
(n, d) and cast to float64 once; norms and dot products are cached because several statistics share them.
"""

from __future__ import annotations

import torch


class TokenIndex:
    """Which positions of a (B, T) batch are counted, and the sequence each belongs to."""

    def __init__(self, attention_mask: torch.Tensor, exclude_bos: bool = False):
        counted = attention_mask.bool().clone()
        if exclude_bos:
            counted[:, 0] = False  # right padding: position 0 is each sequence's first token
        self.counted = counted  # (B, T)
        self.flat = counted.reshape(-1).nonzero().squeeze(1)  # (n,)
        self.seq = self.flat // counted.shape[1]  # (n,) row of each counted token
        self.n_seq = counted.shape[0]

    def select(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (n, ...) for the counted tokens."""
        return x.reshape(-1, *x.shape[2:])[self.flat]


class LayerPieces:
    """Pieces (resid_pre, attn_out, resid_mid, mlp_out, resid_post, ...) of one layer, counted tokens only."""

    def __init__(self, layer: int, raw: dict[str, torch.Tensor], index: TokenIndex):
        self.layer = layer
        self.raw = raw  # name -> (B, T, d) as captured, model dtype
        self.index = index
        self._vec: dict[str, torch.Tensor] = {}
        self._dot: dict[tuple[str, str], torch.Tensor] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.raw

    def vec(self, name: str) -> torch.Tensor:
        """(n, d) float64 rows of piece `name` for the counted tokens."""
        if name not in self._vec:
            self._vec[name] = self.index.select(self.raw[name]).to(torch.float64)
        return self._vec[name]

    def dot(self, a: str, b: str) -> torch.Tensor:
        key = (a, b) if a <= b else (b, a)
        if key not in self._dot:
            self._dot[key] = (self.vec(a) * self.vec(b)).sum(-1)  # (n,)
        return self._dot[key]

    def norm(self, name: str) -> torch.Tensor:
        return self.dot(name, name).sqrt()

    def cos(self, a: str, b: str) -> torch.Tensor:
        # a zero vector has no direction: report cosine 0 rather than NaN
        return self.dot(a, b) / (self.norm(a) * self.norm(b)).clamp_min(1e-300)

    def ratio(self, a: str, b: str) -> torch.Tensor:
        return self.norm(a) / self.norm(b).clamp_min(1e-300)
