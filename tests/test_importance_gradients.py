"""Gradient importance against a finite-difference estimate and a closed-form softmax-regression gradient."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tlm_probe.importance.gradients import GradientImportance
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.tlm import TaperedLM


def seq_loss(model):
    def fn(seq):
        ids = seq["input_ids"]
        logits = model(ids)
        nll = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten(), reduction="sum")
        return nll, ids[:, 1:].numel()

    return fn


def test_taylor_equals_finite_difference_on_tiny_model():
    torch.manual_seed(0)
    cfg = TLMConfig(
        vocab_size=41,
        d_model=16,
        n_layers=3,
        n_heads=2,
        d_ff=(48, 32, 16),
        max_seq_len=12,
        norm="layernorm",
        mlp="gelu",
        init_scale=0.2,
    )
    model = TaperedLM(cfg).double().eval()
    data = torch.randint(0, 41, (4, 10), generator=torch.Generator().manual_seed(1))
    groups = {l: list(b.mlp.parameters()) for l, b in enumerate(model.blocks)}
    gi = GradientImportance(groups)
    for row in data:
        gi.update({"input_ids": row[None]}, seq_loss(model))
    taylor = gi.taylor()

    @torch.no_grad()
    def mean_loss():
        total, n = seq_loss(model)({"input_ids": data})  # float64 throughout (lm_loss casts to float32)
        return total.item() / n

    eps = 1e-4
    for l, params in groups.items():
        saved = [p.detach().clone() for p in params]
        losses = []
        for scale in (1 + eps, 1 - eps):
            for p, s in zip(params, saved, strict=True):
                p.data = s * scale
            losses.append(mean_loss())
        for p, s in zip(params, saved, strict=True):
            p.data = s
        fd = (losses[0] - losses[1]) / (2 * eps)  # d/d(alpha) L(alpha * theta) at alpha = 1 = sum theta * g
        assert taylor[l] == pytest.approx(abs(fd), rel=1e-4, abs=1e-9)
        assert taylor[l] > 1e-6


def test_fisher_taylor_gradnorm_closed_form_softmax_regression():
    rng = np.random.default_rng(0)
    n_seq, n_tok, d, k = 5, 7, 4, 3
    X = rng.normal(size=(n_seq, n_tok, d))
    Y = rng.integers(0, k, size=(n_seq, n_tok))
    W0 = rng.normal(size=(k, d))
    lin = torch.nn.Linear(d, k, bias=False).double()
    lin.weight.data = torch.tensor(W0)

    def loss_fn(seq):
        return F.cross_entropy(lin(seq["x"]), seq["y"], reduction="sum"), len(seq["y"])

    gi = GradientImportance({0: [lin.weight]})
    for s in range(n_seq):
        gi.update({"x": torch.tensor(X[s]), "y": torch.tensor(Y[s])}, loss_fn)

    # closed form: dCE/dW = (softmax(W x) - onehot(y)) x^T
    def grad(x, y):
        z = x @ W0.T
        p = np.exp(z - z.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        p[np.arange(len(y)), y] -= 1
        return p.T @ x  # summed over tokens

    per_seq = [grad(X[s], Y[s]) / n_tok for s in range(n_seq)]
    G = sum(grad(X[s], Y[s]) for s in range(n_seq)) / (n_seq * n_tok)
    rows = gi.rows()
    assert rows["taylor_mlp"][0]["value"] == pytest.approx(abs((W0 * G).sum()), rel=1e-10)
    assert rows["grad_norm_mlp"][0]["value"] == pytest.approx(np.linalg.norm(G), rel=1e-10)
    fisher = 0.5 * np.mean([((g * W0) ** 2).sum() for g in per_seq])
    assert rows["fisher_mlp"][0]["value"] == pytest.approx(fisher, rel=1e-10)
    assert rows["fisher_mlp"][0]["ci_low"] < fisher < rows["fisher_mlp"][0]["ci_high"]
    assert lin.weight.grad is None  # .grad of the model is never touched
