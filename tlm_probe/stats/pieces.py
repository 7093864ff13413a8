"""The per-layer input of every statistic: the captured pieces of one layer for one batch.

Only counted tokens are used (padding removed, position 0 removed with exclude_bos). All the dot products
between pieces come from one Gram matrix per token, computed with a single batched matmul: the eight
alignment statistics need eleven dot products of five pieces, and one (n, k, d) @ (n, d, k) product is far
cheaper than eleven separate passes (this keeps the probe within a few percent of a plain forward pass).
The products are taken in float32 (float64 for float64 models; bf16/fp16 pieces are upcast first): a
per-token relative error of ~1e-7, far below the spread of the statistics. Every value is then
converted to float64 before anything is summed.
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
        self.all = bool(counted.all())  # no padding, nothing excluded: selection is a reshape
        self.flat = counted.reshape(-1).nonzero().squeeze(1)  # (n,)
        self.seq = self.flat // counted.shape[1]  # (n,) row of each counted token
        self.n_seq = counted.shape[0]
        self.seq_counts = counted.sum(1).to(torch.float64)  # (B,) tokens counted per sequence

    def select(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (n, ...) for the counted tokens."""
        flat = x.reshape(-1, *x.shape[2:])
        return flat if self.all else flat[self.flat]


class LayerPieces:
    """Pieces (resid_pre, attn_out, resid_mid, mlp_out, resid_post, ...) of one layer, counted tokens only."""

    def __init__(self, layer: int, raw: dict[str, torch.Tensor], index: TokenIndex):
        self.layer = layer
        self.raw = raw  # name -> (B, T, d) as captured, model dtype
        self.index = index
        self._vec: dict[str, torch.Tensor] = {}
        self._gram: torch.Tensor | None = None
        self._slot: dict[str, int] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.raw

    def vec(self, name: str) -> torch.Tensor:
        """(n, d) float64 rows of piece `name` for the counted tokens."""
        if name not in self._vec:
            self._vec[name] = self.index.select(self.raw[name]).to(torch.float64)
        return self._vec[name]

    def gram(self) -> torch.Tensor:
        """(n, k, k) float64 dot products between the residual-width pieces, for every counted token."""
        if self._gram is None:
            width = next(iter(self.raw.values())).shape[-1]
            names = [k for k, v in self.raw.items() if v.shape[-1] == width]
            self._slot = {k: i for i, k in enumerate(names)}
            x = torch.stack([self.raw[k] for k in names], dim=-2)  # (B, T, k, d)
            x = x if x.dtype == torch.float64 else x.to(torch.float32)
            # every position, then keep the counted rows of the small (k, k) result: gathering the (k, d)
            # pieces instead cost more than the products on the few padded positions (bucketing)
            self._gram = self.index.select(x @ x.transpose(-1, -2)).to(torch.float64)  # (n, k, k)
        return self._gram

    def dot(self, a: str, b: str) -> torch.Tensor:
        g = self.gram()
        if a in self._slot and b in self._slot:
            return g[:, self._slot[a], self._slot[b]]
        return (self.vec(a) * self.vec(b)).sum(-1)  # pieces of another width (mlp_post)

    def all_finite(self) -> bool:
        return bool(torch.isfinite(self.gram().diagonal(dim1=1, dim2=2)).all())

    def sq_norms(self) -> dict[str, torch.Tensor]:
        """Squared norm of every residual-width piece, (n,) each: inf/NaN here means inf/NaN in the piece."""
        diag = self.gram().diagonal(dim1=1, dim2=2)  # (n, k)
        return {k: diag[:, i] for k, i in self._slot.items()}

    def norm(self, name: str) -> torch.Tensor:
        return self.dot(name, name).sqrt()

    def cos(self, a: str, b: str) -> torch.Tensor:
        # a zero vector has no direction: report cosine 0 rather than NaN
        return self.dot(a, b) / (self.norm(a) * self.norm(b)).clamp_min(1e-300)

    def ratio(self, a: str, b: str) -> torch.Tensor:
        return self.norm(a) / self.norm(b).clamp_min(1e-300)
