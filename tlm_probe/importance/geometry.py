"""Geometry of the residual stream across depth.

Representations are indexed r = 0..L: r = l is the stream entering block l (r = 0 the embeddings) and
r = L the output of the last block, so "drop blocks l..l+n-1" compares r = l with r = l + n (Gromov et al.
2024, "The Unreasonable Ineffectiveness of the Deeper Layers").
"""

from __future__ import annotations

import math

import numpy as np
import torch

from tlm_probe.stats.reduce import all_reduce_, all_reduce_int

_CHUNK = 2048  # tokens per einsum chunk: the (R, R, chunk) cosine tensor stays small


def unit(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)


class AngularDistance:
    """Streaming token mean of arccos(cos(x_i, x_j))/pi for every pair of representations."""

    def __init__(self, n_reps: int):
        self.sum = torch.zeros(n_reps, n_reps, dtype=torch.float64)
        self.count = 0

    def update(self, reps: torch.Tensor) -> None:
        """reps: (R, N, d) for N valid tokens."""
        u = unit(reps.detach().cpu().double())  # float64: arccos is steep near cos = 1
        for start in range(0, u.shape[1], _CHUNK):
            c = torch.einsum("rnd,snd->rsn", u[:, start : start + _CHUNK], u[:, start : start + _CHUNK])
            self.sum += torch.arccos(c.clamp(-1.0, 1.0)).sum(-1) / math.pi
        self.count += u.shape[1]

    def all_reduce_(self) -> None:
        all_reduce_(self.sum)
        self.count = all_reduce_int(self.count)

    def matrix(self) -> np.ndarray:
        m = (self.sum / max(self.count, 1)).numpy()
        m = (m + m.T) / 2  # symmetric by definition; removes last-bit rounding differences
        np.fill_diagonal(m, 0.0)  # d(x, x) = 0 exactly; arccos(1 - eps) would leave ~1e-8
        return m


def best_blocks_to_drop(dist: np.ndarray) -> list[tuple[int, int, float]]:
    """For each block size n = 1..R-1: (start l*, n, distance) minimising dist[l, l + n] over l."""
    R = dist.shape[0]
    out = []
    for n in range(1, R):
        diag = np.array([dist[l, l + n] for l in range(R - n)])
        l_star = int(diag.argmin())
        out.append((l_star, n, float(diag[l_star])))
    return out


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA (Kornblith et al. 2019) between (n, d1) and (n, d2) samples of the same tokens."""
    x = x.double() - x.double().mean(0)
    y = y.double() - y.double().mean(0)
    cross = (y.T @ x).square().sum()
    denom = (x.T @ x).norm() * (y.T @ y).norm()
    return float(cross / denom) if denom > 0 else math.nan


def cka_matrix(reps: list[torch.Tensor]) -> np.ndarray:
    R = len(reps)
    out = np.eye(R)
    for i in range(R):
        for j in range(i + 1, R):
            out[i, j] = out[j, i] = linear_cka(reps[i], reps[j])
    return out


def squared_singular_values(x: torch.Tensor) -> torch.Tensor:
    """Eigenvalues of the smaller Gram matrix (x^T x or x x^T), i.e. the squared singular values of x.

    Much faster than an SVD on CPU for the tall samples and wide weights we see (2048 x 384, 384 x 1536).
    """
    x = x.double()
    gram = x.T @ x if x.shape[0] >= x.shape[1] else x @ x.T
    lam = torch.linalg.eigvalsh(gram).flip(0)  # descending
    # eigenvalues within rounding noise of zero are zero (numerical-rank cut-off, as in matrix_rank)
    tol = lam[0].clamp_min(0) * max(x.shape) * torch.finfo(torch.float64).eps * 10
    return torch.where(lam > tol, lam, torch.zeros_like(lam))


def _centered_singular_values(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return squared_singular_values(x - x.mean(0)).sqrt()


def effective_rank(x: torch.Tensor) -> float:
    """exp of the entropy of the normalised singular values of centred (n, d) samples (Roy & Vetterli)."""
    s = _centered_singular_values(x)
    p = s / s.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def participation_ratio(x: torch.Tensor) -> float:
    """(sum lambda)^2 / sum lambda^2 over the covariance eigenvalues of (n, d) samples."""
    x = x.double()
    lam = squared_singular_values(x - x.mean(0))
    return float(lam.sum().square() / lam.square().sum())


class Anisotropy:
    """Mean cosine between distinct tokens, exact and streaming: (|sum u|^2 - N) / (N (N - 1)).

    Ethayarajh (2019) estimates the same quantity from random pairs; summing unit vectors gives the
    mean over all ordered pairs i != j without storing any token.
    """

    def __init__(self, n_reps: int, d: int):
        self.sum = torch.zeros(n_reps, d, dtype=torch.float64)
        self.count = 0

    def update(self, reps: torch.Tensor) -> None:
        """reps: (R, N, d) for N valid tokens."""
        self.sum += unit(reps.detach().cpu().double()).sum(1)
        self.count += reps.shape[1]

    def all_reduce_(self) -> None:
        all_reduce_(self.sum)
        self.count = all_reduce_int(self.count)

    def values(self) -> np.ndarray:
        n = self.count
        if n < 2:
            return np.full(self.sum.shape[0], math.nan)
        return ((self.sum.square().sum(-1) - n) / (n * (n - 1))).numpy()
