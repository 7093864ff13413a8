"""The per-layer input of every statistic: the captured pieces of one layer for one batch.

Only counted tokens are used (padding removed, position 0 removed with exclude_bos). Every statistic is a
function of dot products between pieces, and only the pairs asked for are computed, each once, over every
position (cheaper than gathering the counted rows of the (B, T, d) pieces first), one row dot per pair
(row_dot; a (n, k, d) batched matmul over all pairs, or stacking the pieces for one Gram matrix per token,
cost more). The products are taken in float32 (float64 for float64 models; bf16/fp16 pieces are upcast
first): a per-token relative error of ~1e-7, far below the spread of the statistics. Every value is
converted to float64 before anything is summed.
"""

from __future__ import annotations

import numpy as np
import torch

from tlm_probe.stats.workspace import Workspace


def row_dot(x: torch.Tensor, y: torch.Tensor, scratch: Workspace) -> torch.Tensor:
    """(..., d) x (..., d) -> (...) the dot product of each row. On the CPU numpy's vecdot reads both rows
    and writes nothing but the result, where mul + sum writes the whole product and reads it again
    (measured once, one thread: 10 against 22 us a pair at 256 x 576, 16 against 24 us at 2048 x 64; the
    probe's share is in benchmarks/bench_smollm2.py). Elsewhere (GPU, tensors in an autograd graph) the
    product goes through a reused buffer."""
    if x.device.type == "cpu" and not (x.requires_grad or y.requires_grad):
        return torch.from_numpy(np.vecdot(x.numpy(), y.numpy()))
    return torch.mul(x, y, out=scratch.get("product", x.shape, x)).sum(-1)


class TokenIndex:
    """Which positions of a (B, T) batch are counted, and the sequence each belongs to."""

    def __init__(self, attention_mask: torch.Tensor, exclude_bos: bool = False):
        self.keys = attention_mask.bool()  # (B, T) the positions a query may attend to (no padding)
        counted = self.keys.clone()
        if exclude_bos:
            counted[:, 0] = False  # right padding: position 0 is each sequence's first token
        self.counted = counted  # (B, T)
        self.all = bool(counted.all())  # no padding, nothing excluded: selection is a reshape
        flat = counted.reshape(-1)
        self.flat = torch.arange(flat.numel(), device=flat.device) if self.all else flat.nonzero().squeeze(1)
        self.seq = self.flat // counted.shape[1]  # (n,) row of each counted token
        self.n_seq = counted.shape[0]
        self.seq_counts = counted.sum(1).to(torch.float64)  # (B,) tokens counted per sequence
        # every row counts the same number of tokens: selected tokens are one equal block per sequence
        self.uniform = bool((self.seq_counts == self.seq_counts[0]).all())

    def select_last(self, x: torch.Tensor) -> torch.Tensor:
        """(..., B, T) -> (..., n) for the counted tokens."""
        flat = x.reshape(*x.shape[:-2], -1)
        return flat if self.all else flat.index_select(-1, self.flat)

    def per_sequence(self, values: torch.Tensor) -> torch.Tensor:
        """(k, n) values of the counted tokens -> (k, B) their sum over each sequence."""
        if self.uniform:
            return values.reshape(values.shape[0], self.n_seq, -1).sum(-1)
        sums = torch.zeros(self.n_seq, values.shape[0], dtype=values.dtype, device=values.device)
        return sums.index_add_(0, self.seq.to(values.device), values.T).T


class LayerPieces:
    """Pieces (resid_pre, attn_out, resid_mid, mlp_out, resid_post, ...) of one layer, counted tokens only."""

    def __init__(
        self, layer: int, raw: dict[str, torch.Tensor], index: TokenIndex, scratch=None, scalars=None
    ):
        self.layer = layer
        self.raw = raw  # name -> (B, T, d) as captured, model dtype
        self.scalars = scalars or {}  # name -> (B, T) float64 per-token values (stats/attention.py)
        self.index = index
        self._wide: dict[str, torch.Tensor] = {}
        self._cols: dict[tuple[str, str], torch.Tensor] = {}  # (a, b) -> (B, T) products at every position
        self._scratch = scratch or Workspace()  # the caller's, to reuse the product buffer across layers

    def __contains__(self, name: str) -> bool:
        return name in self.raw

    def dots(self, pairs: tuple[tuple[str, str], ...], out: torch.Tensor | None = None) -> torch.Tensor:
        """(len(pairs), n) float64: row j is the dot product of pairs[j] at every counted token; written
        into `out` when given."""
        cols = self.index.select_last(torch.stack([self._col(a, b) for a, b in pairs]))  # (P, n)
        return cols.to(torch.float64) if out is None else out.copy_(cols)

    def _col(self, a: str, b: str) -> torch.Tensor:
        key = (b, a) if (b, a) in self._cols else (a, b)  # a . b == b . a: computed once
        if key not in self._cols:
            x, y = self._product_dtype(a), self._product_dtype(b)
            self._cols[key] = row_dot(x, y, self._scratch)
        return self._cols[key]

    def _product_dtype(self, name: str) -> torch.Tensor:
        if name not in self._wide:
            x = self.raw[name]
            self._wide[name] = x if x.dtype in (torch.float64, torch.float32) else x.to(torch.float32)
        return self._wide[name]

    def dot(self, a: str, b: str) -> torch.Tensor:
        return self.dots(((a, b),))[0]

    def square(self, name: str) -> torch.Tensor:
        """(B, T) squared norm of piece `name` at every position, in the dtype of the products (the
        statistics read the same products): inf/NaN here means inf/NaN in the piece."""
        return self._col(name, name)

    def norm(self, name: str) -> torch.Tensor:
        return self.dot(name, name).sqrt()

    def cos(self, a: str, b: str) -> torch.Tensor:
        # a zero vector has no direction: report cosine 0 rather than NaN
        return self.dot(a, b) / (self.norm(a) * self.norm(b)).clamp_min(1e-300)

    def ratio(self, a: str, b: str) -> torch.Tensor:
        return self.norm(a) / self.norm(b).clamp_min(1e-300)
