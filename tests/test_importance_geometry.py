"""Geometry statistics against closed forms and brute-force pairwise computations."""

import math

import numpy as np
import pytest
import torch

from tlm_probe.importance.geometry import (
    AngularDistance,
    Anisotropy,
    best_blocks_to_drop,
    cka_matrix,
    effective_rank,
    linear_cka,
    participation_ratio,
)
from tlm_probe.importance.sample import TokenSample


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_angular_distance_matches_pairwise_loop_symmetric_zero_diag():
    reps = torch.randn(4, 50, 8, generator=gen())
    acc = AngularDistance(4)
    acc.update(reps[:, :20])
    acc.update(reps[:, 20:])
    m = acc.matrix()
    assert np.allclose(m, m.T) and np.all(np.diag(m) == 0)
    a = reps.numpy().astype(np.float64)
    for i in range(4):
        for j in range(4):
            if i == j:
                continue
            angles = [
                math.acos(
                    np.clip(a[i, n] @ a[j, n] / np.linalg.norm(a[i, n]) / np.linalg.norm(a[j, n]), -1, 1)
                )
                / math.pi
                for n in range(50)
            ]
            assert m[i, j] == pytest.approx(np.mean(angles), abs=1e-10)


def test_best_block_to_drop_picks_the_smallest_superdiagonal_entry():
    d = np.array([[0, 0.5, 0.9, 0.8], [0.5, 0, 0.1, 0.7], [0.9, 0.1, 0, 0.3], [0.8, 0.7, 0.3, 0]])
    assert best_blocks_to_drop(d) == [(1, 1, 0.1), (1, 2, 0.7), (0, 3, 0.8)]


def test_linear_cka_self_one_invariances_and_gram_form():
    x = torch.randn(200, 10, generator=gen(1))
    q, _ = torch.linalg.qr(torch.randn(10, 10, generator=gen(2)))
    assert linear_cka(x, x) == pytest.approx(1.0)
    assert linear_cka(x, 3.0 * x @ q + 5.0) == pytest.approx(1.0)  # rotation, scale, shift
    y = torch.randn(200, 6, generator=gen(3)) + x[:, :6]
    # independent path: HSIC with centred Gram matrices (Kornblith et al. eq. 3)
    h = torch.eye(200, dtype=torch.float64) - 1 / 200
    k, l = h @ (x.double() @ x.double().T) @ h, h @ (y.double() @ y.double().T) @ h
    ref = (k * l).sum() / ((k * k).sum().sqrt() * (l * l).sum().sqrt())
    assert linear_cka(x, y) == pytest.approx(float(ref), rel=1e-9)
    m = cka_matrix([x, y, x])
    assert np.allclose(np.diag(m), 1) and m[0, 2] == pytest.approx(1) and np.allclose(m, m.T)


def test_effective_rank_and_participation_ratio_closed_form():
    # centred orthonormal columns scaled by s: singular values are exactly s
    n, s = 400, np.array([4.0, 2.0, 1.0, 1.0])
    z = torch.randn(n, 4, generator=gen(4), dtype=torch.float64)
    z = z - z.mean(0)
    q, _ = torch.linalg.qr(z)
    x = (
        q
        * torch.tensor(s)
        @ torch.linalg.qr(torch.randn(16, 16, generator=gen(5), dtype=torch.float64))[0][:4]
    )
    p = s / s.sum()
    assert effective_rank(x + 7.0) == pytest.approx(math.exp(-(p * np.log(p)).sum()), rel=1e-8)
    lam = s**2
    assert participation_ratio(x) == pytest.approx(lam.sum() ** 2 / (lam**2).sum(), rel=1e-8)


def test_anisotropy_equals_mean_pairwise_cosine():
    reps = torch.randn(2, 30, 5, generator=gen(6)) + torch.tensor([[[2.0, 0, 0, 0, 0]], [[0.0] * 5]])
    acc = Anisotropy(2, 5)
    acc.update(reps[:, :11])
    acc.update(reps[:, 11:])
    for r in range(2):
        u = torch.nn.functional.normalize(reps[r].double(), dim=-1)
        c = u @ u.T
        ref = (c.sum() - c.diagonal().sum()) / (30 * 29)
        assert acc.values()[r] == pytest.approx(float(ref), abs=1e-12)
    assert acc.values()[0] > 0.3 > abs(acc.values()[1])


def test_token_sample_is_bounded_seeded_and_uniform_over_batches():
    def run(chunks, seed):
        s = TokenSample(size=50, seed=seed)
        x = torch.arange(400.0).reshape(4, 100, 1)
        mask = torch.ones(4, 100, dtype=torch.bool)
        mask[:, 90:] = False  # padding never sampled
        for c in torch.split(torch.arange(4), chunks):
            s.update([x[c], 2 * x[c]], mask[c], labels=x[c, :, 0].long())
        return s

    a, b = run(1, 0), run(1, 0)
    assert a.n == 50 and a.seen == 360 and torch.equal(a.reps[0], b.reps[0])
    assert torch.equal(a.reps[1], 2 * a.reps[0]) and torch.equal(a.labels, a.reps[0][:, 0].long())
    assert (a.reps[0][:, 0] % 100 < 90).all()
    assert not torch.equal(run(1, 1).reps[0], a.reps[0])
