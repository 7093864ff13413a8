"""The Titans neural long-term memory (Behrouz, Zhong, Mirrokni 2025, arXiv 2501.00663, section 3), computed
chunk-wise in parallel, plus the token-by-token reference it must equal.

Each head owns a 2-layer memory M(x) = W2 silu(W1 x) (W1: d_m x d_h, W2: d_h x d_m, d_m = mem_expand·d_h).
Per token t, with data-dependent rates α_t (forget), θ_t (step size), η_t (momentum) in (0, 1):
    associative loss        ℓ(M; k_t, v_t) = ‖M(k_t) − v_t‖² / d_h           (paper eq. 12, averaged over
                            the head dimension as titans-pytorch's loss is: the scale that keeps the
                            inner step stable, so θ needs no per-token clip to stay finite)
    surprise with momentum  S_t = η_t S_{t−1} − θ_t ∇ℓ(M_{t'}; k_t, v_t)                    (eq. 10)
                            (∇ clipped to norm GRAD_CLIP per token: a loose safety net, see below)
    forgetting              M_t = (1 − α_t) M_{t−1} + S_t                                   (eq. 13)
    read-out                y_t = M_t(q_t), a forward pass without a weight update           (eq. 15)
Parallel training (section 3.2): the sequence is cut into chunks of b tokens and every gradient inside a
chunk is taken at the memory of the chunk's start, M_{t'} with t' = t − (t mod b). Both recurrences are
then linear in the per-token gradients G_i, and unrolling them from the chunk start (local t = 1..b) gives
    M_t = A_t M_0 + d_t S_0 − Σ_{i≤t} c_{t,i} G_i,      S_t = E_t S_0 − Σ_{i≤t} θ_i (E_t/E_i) G_i,
    A_t = Π_{j≤t}(1 − α_j),  E_t = Π_{j≤t} η_j,  d_t = Σ_{s≤t} (A_t/A_s) E_s,
    c_{t,i} = θ_i Σ_{s=i..t} (A_t/A_s)(E_s/E_i)          (the b x b matrices are products, in log space).
The gradients of a linear layer are outer products (G = δ a^T), so M_t(q_t) never materialises per-token
weights: W_t q_t = A_t W_0 q_t + d_t S_0 q_t − Σ_i c_{t,i} δ_i (a_i · q_t), an attention-like b x b product
(the "dual form" of TTT, Sun et al. 2024), applied to both layers in turn. The read-out uses M_t, the memory
after token t's own write (as in TTT); everything at t depends only on tokens <= t, so it is causal.
Padding (valid == False) writes nothing and forgets nothing (θ = α = 0) and resets the momentum (η = 0).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NO_MOMENTUM = -1e4  # log η of a padded token: exp() is exactly 0 in float32, differences stay finite
GRAD_CLIP = 1.0
"""Safety net: each token's inner gradient is clipped to this norm (over both layers) before it enters the
momentum (like titans-pytorch's max_grad_norm option; not in the paper's equations). Stability comes from
the 1/d_h scale of the loss: before it, with the summed loss, this clip bound for 71-79% of tokens from
step 40 on, so the update was mostly θ·g/‖g‖ and surprise's magnitude saturated. With the mean loss it
is d_h times looser and binds rarely; the fraction of clipped tokens is logged (`mem_clip_frac` in
metrics.jsonl) so a run shows when it does."""


def memory_rates(logits: torch.Tensor, valid: torch.Tensor | None, lr_max: float):
    """(log(1−α), log η, θ), each (N, T), from raw logits (N, T, 3) of (α, θ, η); pads write and forget
    nothing. The order is the argument order of memory_chunked / memory_reference."""
    a, th, e = logits.to(_dtype(logits)).unbind(-1)
    log_keep, theta, log_eta = F.logsigmoid(-a), lr_max * torch.sigmoid(th), F.logsigmoid(e)
    if valid is not None:
        log_keep = log_keep * valid
        theta = theta * valid
        log_eta = torch.where(valid, log_eta, torch.full_like(log_eta, NO_MOMENTUM))
    return log_keep, log_eta, theta


def _dtype(x: torch.Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)  # float32 at least, float64 kept (tests)


def _fwd(W1, W2, x):
    """Memory forward on rows of x (N, n, d_h): pre-activation z, hidden h, output y."""
    z = x @ W1.transpose(-1, -2)  # (N, n, d_m)
    h = F.silu(z)
    return z, h, h @ W2.transpose(-1, -2)  # (N, n, d_h)


def _clip_scale(sq_norm: torch.Tensor) -> torch.Tensor:
    """min(1, GRAD_CLIP/‖g‖) from the squared norm ‖g‖² of a token's gradient."""
    return (GRAD_CLIP * torch.rsqrt(sq_norm.clamp_min(1e-30))).clamp(max=1.0)


def _segsum(x: torch.Tensor) -> torch.Tensor:
    """(…, b) -> (…, b, b): [t, s] = Σ_{j=s+1..t} x_j for s <= t, −inf above the diagonal. Each entry sums
    only its own terms (as in Mamba-2's ssd_minimal), so no large cumulative sums cancel."""
    b = x.shape[-1]
    ones = torch.ones(b, b, dtype=torch.bool, device=x.device)
    rep = x[..., :, None].expand(*x.shape, b).masked_fill(~ones.tril(-1), 0)  # [j, s] = x_j if j > s
    return rep.cumsum(-2).masked_fill(~ones.tril(), float("-inf"))


def _prepare(q, k, log_keep, log_eta, theta):
    """What the chunk loop needs that does not depend on the memory's state, for every chunk at once
    (leading dims …, n_chunks), so the sequential loop runs fewer ops:
      A_t = Π_{j≤t}(1 − α_j), E_t = Π_{j≤t} η_j, P = A_t/A_s, Q = E_s/E_i (lower triangles, log space),
      C = (P Q) ⊙ θ_i (…, b, b), d = P E (…, b); returned: A q, d q (…, b, d_h), C ⊙ q kᵀ, ‖k‖² (…, b),
      A, d (…, b, 1), C, the end-of-chunk weights k ⊙ [c_{b,i} | θ_i E_b/E_i] (…, b, 2d_h) and the
      chunk-end scalars (A_b, d_b, E_b) (…, 3, 1, 1)."""
    P, Q = _segsum(log_keep).exp(), _segsum(log_eta).exp()
    C = (P @ Q) * theta[..., None, :]
    A, E = log_keep.cumsum(-1).exp()[..., None], log_eta.cumsum(-1).exp()
    d = P @ E[..., None]
    pair = torch.stack([C[..., -1, :], theta * Q[..., -1, :]], dim=-1)[..., None]  # (…, b, 2, 1)
    ends = torch.stack([A[..., -1, 0], d[..., -1, 0], E[..., -1]], dim=-1)[..., None, None]
    return (A * q, d * q, C * (q @ k.mT), k.square().sum(-1), A, d, C, (k[..., None, :] * pair).flatten(-2),
            pair, ends)


def _grad_signals(W1, W2, k, k_sq, v, stats=None, writes=None):
    """Per-token gradient factors of ‖M(k) − v‖²/d_h at (W1, W2): ∇W2 = r hᵀ, ∇W1 = δ kᵀ, both scaled
    so that each token's gradient has norm at most GRAD_CLIP (‖r hᵀ‖ = ‖r‖‖h‖ for outer products).
    stats: a dict to which the counts of clipped and of writing tokens (writes > 0) are added."""
    z = k @ W1.mT  # (N, b, d_m)
    h = F.silu(z)
    r = (2.0 / k.shape[-1]) * (h @ W2.mT - v)  # (N, b, d_h)
    s = torch.sigmoid(z)
    delta = (r @ W2) * (s + h * (1 - s))  # silu'(z) = σ(z) + silu(z)(1 − σ(z)); (N, b, d_m)
    scale = _clip_scale(r.square().sum(-1) * h.square().sum(-1) + delta.square().sum(-1) * k_sq)[..., None]
    if stats is not None:
        with torch.no_grad():
            w = writes > 0
            # tensors, not Python ints: no device synchronisation in the forward
            stats["clipped"] = stats.get("clipped", 0) + ((scale[..., 0] < 1) & w).sum()
            stats["tokens"] = stats.get("tokens", 0) + w.sum()
    return h, r * scale, delta * scale


def _chunk(state, k, v, prep, writes, stats):
    """One chunk: read-outs y (N, b, d_h) of its b tokens and the state (W1, W2, S1, S2) after it; prep:
    this chunk's slice of _prepare. Row scalings commute with the matmuls (A_t (W x_t) = W (A_t x_t)), and
    the sums of the read go into the matmuls' accumulators (baddbmm)."""
    W1, W2, S1, S2 = state
    Aq, dq, cqk, k_sq, A, d, C, k_pair, pair, ends = prep
    dh = k.shape[-1]
    h_k, r, delta = _grad_signals(W1, W2, k, k_sq, v, stats, writes)
    # M_t(q_t): W_t x = A_t W0 x + d_t S0 x − Σ_i C_{t,i} (a_i·x) g_i for each layer in turn
    h_q = F.silu(torch.baddbmm(torch.baddbmm(Aq @ W1.mT, dq, S1.mT), cqk, delta, alpha=-1))  # (N, b, d_m)
    y = torch.baddbmm(torch.baddbmm((A * h_q) @ W2.mT, d * h_q, S2.mT), C * (h_q @ h_k.mT), r, alpha=-1)
    # end of chunk: W ← A_b W + d_b S − Σ_i c_{b,i} G_i, S ← E_b S − Σ_i θ_i (E_b/E_i) G_i; the two sums
    # of each layer come from one matmul ([c_{b,i} | θ_i E_b/E_i] weight the factors of G_i)
    u1 = delta.mT @ k_pair  # (N, d_m, 2d_h)
    u2 = (r[..., None, :] * pair).flatten(-2).mT @ h_k  # (N, 2d_h, d_m)
    a_b, d_b, e_b = ends.unbind(-3)
    W1n = torch.addcmul(a_b * W1, d_b, S1) - u1[..., :dh]
    W2n = torch.addcmul(a_b * W2, d_b, S2) - u2[..., :dh, :]
    return (W1n, W2n, e_b * S1 - u1[..., dh:], e_b * S2 - u2[..., dh:, :]), y


def _pad_to(x: torch.Tensor, n: int, dim: int) -> torch.Tensor:
    extra = n - x.shape[dim]
    if extra == 0:
        return x
    shape = list(x.shape)
    shape[dim] = extra
    return torch.cat([x, x.new_zeros(shape)], dim=dim)


def memory_chunked(q, k, v, log_keep, log_eta, theta, W1, W2, chunk: int, stats=None) -> torch.Tensor:
    """Read-outs y (N, T, d_h) of N independent memories over T tokens, `chunk` tokens at a time.

    q, k, v: (N, T, d_h); log_keep, log_eta, theta: (N, T) (see memory_rates); W1 (N, d_m, d_h) and
    W2 (N, d_h, d_m): initial memory weights; the momentum starts at zero. A last partial chunk is padded
    at the end with tokens that write nothing, which cannot change earlier read-outs. stats: an optional
    dict that receives the counts of clipped and of writing tokens (see GRAD_CLIP)."""
    (N, T, dh), dt = q.shape, _dtype(q)
    n = -(-T // chunk) * chunk
    q, k, v = (_pad_to(x.to(dt), n, 1).view(N, n // chunk, chunk, dh) for x in (q, k, v))
    rates = [_pad_to(x, n, 1).view(N, n // chunk, chunk) for x in (log_keep, log_eta, theta)]
    # unbind, not indexing per chunk: the backward of x[:, c] writes a zero tensor of all chunks each time
    preps = zip(*(x.unbind(1) for x in _prepare(q, k, *rates)), strict=True)
    state = (W1.to(dt), W2.to(dt), torch.zeros_like(W1, dtype=dt), torch.zeros_like(W2, dtype=dt))
    outs = []
    for kc, vc, wc, prep in zip(k.unbind(1), v.unbind(1), rates[2].unbind(1), preps, strict=True):
        state, y = _chunk(state, kc, vc, prep, wc, stats)
        outs.append(y)
    return torch.cat(outs, dim=1)[:, :T]


def memory_reference(q, k, v, log_keep, log_eta, theta, W1, W2, chunk: int, stats=None) -> torch.Tensor:
    """The same memory, token by token, with per-token weights and the inner gradients from autograd:
    an independent path for tests and the benchmark (slow: T steps of explicit weight updates)."""
    T, dt = q.shape[1], _dtype(q)
    W = [W1.to(dt), W2.to(dt)]
    S = [torch.zeros_like(W[0]), torch.zeros_like(W[1])]
    start = W
    outs = []
    for t in range(T):
        if t % chunk == 0:  # gradients inside this chunk are taken at the chunk's initial memory
            start = [w if w.requires_grad else w.detach().requires_grad_() for w in W]
        kt, vt = k[:, t : t + 1].to(dt), v[:, t : t + 1].to(dt)
        with torch.enable_grad():
            loss = (_fwd(*start, kt)[2] - vt).pow(2).mean(-1).sum()  # mean over d_h; summed over N
            grads = torch.autograd.grad(loss, start, create_graph=True)
        scale = _clip_scale(sum(g.square().sum((-2, -1)) for g in grads))[:, None, None]
        grads = [g * scale for g in grads]
        keep, eta, lr = log_keep[:, t].exp(), log_eta[:, t].exp(), theta[:, t]
        S = [eta[:, None, None] * s - lr[:, None, None] * g for s, g in zip(S, grads, strict=True)]
        W = [keep[:, None, None] * w + s for w, s in zip(W, S, strict=True)]
        outs.append(_fwd(*W, q[:, t : t + 1].to(dt))[2])
    return torch.cat(outs, dim=1)
