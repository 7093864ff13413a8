"""In-context updates of one continuum-memory level (Nested Learning, arXiv 2512.24695, eq. 71), computed
chunk-parallel, plus the token-by-token reference it must equal (forward and gradients; tests).

Level ℓ is an MLP with weights θ (SwiGLU: W_gate, W_in, W_out; GELU: W_in, W_out) read on its normalised
input x̂_t. Eq. 71 updates θ once every C tokens with the sum of the chunk's error terms,
    θ_{c+1} = θ_c − η Σ_{t ∈ chunk c} (1/C) ∇_θ ℓ(θ_c; x̂_t),     ℓ(θ; x̂_t) = ½ ‖MLP_θ(x̂_t) − x̂_{t+1}‖² / d,
and every token of chunk c is read with θ_c (the update of chunk c applies from chunk c+1 on), so the
output at t depends on tokens <= t only: causal across chunk boundaries. θ_0 is the level's parameter,
learned by the outer optimizer across contexts (its gradient flows through every update); η is a learned
step size (models/cms.py), and each chunk's step is bounded (MAX_STEP, a loose safety net).
The error term: the paper leaves f(θ; x_t) open; ours is the associative objective of predicting the
next position's level input from the current one (an in-context transition memory), averaged over the d
features (so η does not scale with width) and over the chunk. The last token of the sequence and padding
write nothing (weight 0), and no pad is a target.

Chunk-parallel: within a chunk all C gradients are taken at θ_c, so they are C outer products summed by one
matmul (∇W_out = rᵀh, ∇W_in = δᵀx̂, ...; written out below); only the T/C chunk steps are sequential. The
read of every chunk is then done at once with the stacked per-chunk weights (N, n_chunks, ...) so the level's
hook points see whole (N, T, d_l) activations (what a hook returns is what the read uses; the update itself
is computed from the unhooked activations).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

WEIGHTS = {"swiglu": ("W_gate", "W_in", "W_out"), "gelu": ("W_in", "W_out")}
"""Weight matrices of each MLP kind, in the order the functions below take them (nn.Linear layout)."""


def _identity(name, t):
    return t


def _swiglu(W, x, hook=_identity):
    Wg, Wi, _ = W
    pre = hook("pre", x @ Wg.mT)
    lin = hook("pre_linear", x @ Wi.mT)
    return {"pre": pre, "pre_linear": lin, "post": hook("post", F.silu(pre) * lin)}


def _swiglu_grads(W, x, a, r):
    """∇ of Σ_t r_t·y_t over (W_gate, W_in, W_out), with silu'(z) = σ(z)(1 + z(1 − σ(z)))."""
    dh = r @ W[2]  # (N, C, d_l)
    s = torch.sigmoid(a["pre"])
    d_pre = dh * a["pre_linear"] * s * (1 + a["pre"] * (1 - s))
    d_lin = dh * F.silu(a["pre"])
    return d_pre.mT @ x, d_lin.mT @ x, r.mT @ a["post"]


def _gelu(W, x, hook=_identity):
    pre = hook("pre", x @ W[0].mT)
    return {"pre": pre, "post": hook("post", F.gelu(pre))}


def _gelu_grads(W, x, a, r):
    """Exact (erf) GELU: gelu'(z) = Φ(z) + z φ(z)."""
    dh = r @ W[1]
    z = a["pre"]
    d_gelu = 0.5 * (1 + torch.erf(z / math.sqrt(2))) + z * torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    d_pre = dh * d_gelu
    return d_pre.mT @ x, r.mT @ a["post"]


FUNCTIONAL = {"swiglu": (_swiglu, _swiglu_grads), "gelu": (_gelu, _gelu_grads)}


def targets(x: torch.Tensor, valid: torch.Tensor | None):
    """v_t = x_{t+1} (N, T, d) and write weights w (N, T): 1 where t and t+1 are both real tokens."""
    v = torch.cat([x[:, 1:], torch.zeros_like(x[:, :1])], dim=1)
    w = torch.ones(x.shape[:2], dtype=x.dtype, device=x.device)
    w[:, -1] = 0
    if valid is not None:
        real = valid.to(x.dtype)
        w = w * real * torch.cat([real[:, 1:], real[:, :1]], dim=1)
    return v, w


MAX_STEP = 0.25
"""Safety net: one chunk's update moves a level's weights by at most MAX_STEP·‖θ_0‖ (Frobenius over its
matrices, per sequence). The error term is cubic in the weights (SwiGLU), so an unlucky large step can run
away; this bound keeps the growth at most linear in the number of chunks. Loose: it binds only on steps
a quarter the size of the weights themselves."""


def _bounded(eta, grads, bound):
    """eta·grads scaled so that their joint norm (per leading index) is at most `bound`."""
    sq = sum(g.square().sum((-2, -1)) for g in grads)  # (N,)
    scale = (bound / (eta * sq.clamp_min(1e-30).sqrt())).clamp(max=1.0)[:, None, None]
    return [eta * scale * g for g in grads]


def _pad(x: torch.Tensor, n: int) -> torch.Tensor:
    return x if x.shape[1] == n else torch.cat([x, x.new_zeros(x.shape[0], n - x.shape[1], *x.shape[2:])], 1)


def chunk_weights(kind, W0, x, v, w, eta, chunk: int):
    """The weights in effect in each chunk, each stacked (N, n_chunks, ...); chunk 0 reads with W0.

    W0: the level's weights (one copy, nn.Linear layout); x, v: (N, T, d); w: (N, T); eta: scalar tensor."""
    acts, grads = FUNCTIONAL[kind]
    N, T, d = x.shape
    n = -(-T // chunk)
    W = [w0.expand(N, *w0.shape) for w0 in W0]
    bound = MAX_STEP * torch.sqrt(sum(w0.square().sum() for w0 in W0))
    stacks = [[m] for m in W]
    for c in range(n - 1):  # the last chunk's update would only reach tokens after the context
        sl = slice(c * chunk, (c + 1) * chunk)
        xc = x[:, sl]
        a = acts(W, xc)
        y = a["post"] @ W[-1].mT  # (N, C, d)
        r = (y - v[:, sl]) * (w[:, sl, None] / (d * chunk))  # ∂(Σ_t (1/C) ℓ_t)/∂y_t
        W = [m - step for m, step in zip(W, _bounded(eta, grads(W, xc, a, r), bound), strict=True)]
        for s, m in zip(stacks, W, strict=True):
            s.append(m)
    return [torch.stack(s, dim=1) for s in stacks]


def read_chunked(kind, W0, x, valid, eta, chunk: int, hook=_identity) -> torch.Tensor:
    """The level's output (N, T, d) on its normalised input x (N, T, d), updated in context every `chunk`
    tokens. hook(name, t) sees each activation as (N, T, d_l) and may replace it."""
    N, T, d = x.shape
    v, w = targets(x, valid)
    Ws = chunk_weights(kind, W0, x, v, w, eta, chunk)
    n = Ws[0].shape[1]
    xc = _pad(x, n * chunk).view(N, n, chunk, d)

    def whole(name, t):  # (N, n, C, d_l) <-> the (N, T, d_l) the hook points show
        flat = hook(name, t.reshape(N, n * chunk, -1)[:, :T])
        return _pad(flat, n * chunk).view(N, n, chunk, -1)

    a = FUNCTIONAL[kind][0](Ws, xc, whole)
    y = a["post"] @ Ws[-1].mT  # (N, n, C, d)
    return y.reshape(N, n * chunk, d)[:, :T]


def read_reference(kind, W0, x, valid, eta, chunk: int, hook=_identity) -> torch.Tensor:
    """The same level token by token: per-token weights, each token's inner gradient from autograd, the
    accumulated update applied after every `chunk`-th token. An independent path for tests (slow)."""
    N, T, d = x.shape
    v, w = targets(x, valid)
    W = [w0.expand(N, *w0.shape) for w0 in W0]
    bound = MAX_STEP * torch.sqrt(sum(w0.square().sum() for w0 in W0))
    acc = [torch.zeros_like(m) for m in W]
    outs = []
    for t in range(T):
        xt = x[:, t : t + 1]
        at = [m if m.requires_grad else m.detach().requires_grad_() for m in W]
        with torch.enable_grad():
            hidden = F.silu(xt @ at[0].mT) * (xt @ at[1].mT) if kind == "swiglu" else F.gelu(xt @ at[0].mT)
            y = hidden @ at[-1].mT
            loss = (0.5 / (d * chunk) * w[:, t] * (y - v[:, t : t + 1]).square().sum((-2, -1))).sum()
            g = torch.autograd.grad(loss, at, create_graph=torch.is_grad_enabled())
        acc = [s + gi for s, gi in zip(acc, g, strict=True)]
        a = FUNCTIONAL[kind][0](W, xt, lambda name, h, t=t: hook(name, h))
        outs.append(a["post"] @ W[-1].mT)
        if (t + 1) % chunk == 0:
            W = [m - step for m, step in zip(W, _bounded(eta, acc, bound), strict=True)]
            acc = [torch.zeros_like(m) for m in W]
    return torch.cat(outs, dim=1)
