"""Linear CKA between every layer of one model and every layer of another, streamed over tokens.

For activations X (n, d1) and Y (n, d2) of the same n tokens, centred, linear CKA (Kornblith et al. 2019) is
    CKA = ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F).
Every term is a function of sums over tokens: sum x, sum y, X^T X, Y^T Y and Y^T X, since
Xc^T Yc = X^T Y - n mean_x mean_y^T. So no activation is stored: each batch adds its sums (float64), the
sums of several batches or torchrun ranks simply add (exactly mergeable), and the value is formed at the end.
Memory: (L_A d_A^2 + L_B d_B^2 + L_A L_B d_A d_B) float64 numbers, e.g. 9 x 9 layers of 64 wide: 3 MB.
"""

from __future__ import annotations

import torch


class LayerCKA:
    """Sums for the linear CKA of each (layer of A, layer of B) pair; add() a batch, value() at the end."""

    def __init__(self, n_a: int, d_a: int, n_b: int, d_b: int):
        f64 = torch.float64
        self.n = 0
        self.sum_a, self.sum_b = torch.zeros(n_a, d_a, dtype=f64), torch.zeros(n_b, d_b, dtype=f64)
        self.gram_a = torch.zeros(n_a, d_a, d_a, dtype=f64)  # X_i^T X_i per layer i of A
        self.gram_b = torch.zeros(n_b, d_b, d_b, dtype=f64)
        self.cross = torch.zeros(n_a, n_b, d_a, d_b, dtype=f64)  # X_i^T Y_j

    def add(self, a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
        """a[i]: (n, d_a) of layer i of A; b[j]: (n, d_b) of layer j of B, the same n tokens in order."""
        xs = torch.stack([x.double().cpu() for x in a])  # (L_A, n, d_a)
        ys = torch.stack([y.double().cpu() for y in b])  # (L_B, n, d_b)
        self.n += xs.shape[1]
        self.sum_a += xs.sum(1)
        self.sum_b += ys.sum(1)
        self.gram_a += xs.transpose(1, 2) @ xs
        self.gram_b += ys.transpose(1, 2) @ ys
        self.cross += torch.einsum("ind,jne->ijde", xs, ys)

    def merge_(self, other: LayerCKA) -> LayerCKA:
        for name in ("sum_a", "sum_b", "gram_a", "gram_b", "cross"):
            getattr(self, name).add_(getattr(other, name))
        self.n += other.n
        return self

    def tensors(self) -> list[torch.Tensor]:
        """The sums, for an all-reduce across ranks (each rank's sums add)."""
        return [self.sum_a, self.sum_b, self.gram_a, self.gram_b, self.cross]

    def value(self) -> torch.Tensor:
        """(L_A, L_B) linear CKA; NaN where a layer's centred activations are all zero."""
        n = max(self.n, 1)
        mu_a, mu_b = self.sum_a / n, self.sum_b / n  # (L_A, d_a), (L_B, d_b)
        ca = self.gram_a - n * mu_a[:, :, None] * mu_a[:, None, :]  # centred Grams
        cb = self.gram_b - n * mu_b[:, :, None] * mu_b[:, None, :]
        cross = self.cross - n * torch.einsum("id,je->ijde", mu_a, mu_b)
        num = (cross**2).sum((-2, -1))  # (L_A, L_B)
        den = torch.linalg.matrix_norm(ca)[:, None] * torch.linalg.matrix_norm(cb)[None, :]
        return torch.where(den > 0, num / den.clamp_min(1e-300), torch.full_like(num, float("nan")))
