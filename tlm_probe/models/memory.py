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


def _grad_signals(W1, W2, k, v, stats=None, writes=None):
    """Per-token gradient factors of ‖M(k) − v‖²/d_h at (W1, W2): ∇W2 = r hᵀ, ∇W1 = δ kᵀ, both scaled
    so that each token's gradient has norm at most GRAD_CLIP (‖r hᵀ‖ = ‖r‖‖h‖ for outer products).
    stats: a dict to which the counts of clipped and of writing tokens (writes > 0) are added."""
    z, h, y = _fwd(W1, W2, k)
    r = (2.0 / k.shape[-1]) * (y - v)  # (N, b, d_h)
    s = torch.sigmoid(z)
    delta = (r @ W2) * (s * (1 + z * (1 - s)))  # silu'(z); (N, b, d_m)
    sq = (r.square().sum(-1) * h.square().sum(-1) + delta.square().sum(-1) * k.square().sum(-1))
    scale = _clip_scale(sq)[..., None]
    if stats is not None:
        with torch.no_grad():
            w = writes > 0
            # tensors, not Python ints: no device synchronisation in the forward
            stats["clipped"] = stats.get("clipped", 0) + ((scale[..., 0] < 1) & w).sum()
            stats["tokens"] = stats.get("tokens", 0) + w.sum()
    return h, r * scale, delta * scale


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


def _decays(log_keep, log_eta, theta):
    """Chunk coefficients: C (N, b, b), d, A, E (N, b) and the momentum carry θ_i E_b/E_i (N, b)."""
    P, Q = _segsum(log_keep).exp(), _segsum(log_eta).exp()  # A_t/A_s and E_s/E_i (lower triangles)
    C = (P @ Q) * theta[..., None, :]
    E = log_eta.cumsum(-1).exp()
    d = (P @ E[..., None]).squeeze(-1)
    return C, d, log_keep.cumsum(-1).exp(), E, theta * Q[..., -1, :]


def _read(W0, S0, A, d, C, keys, grads, x):
    """W_t x_t for every t in the chunk: A_t W0 x + d_t S0 x − Σ_i C_{t,i} (keys_i·x_t) grads_i."""
    base = A[..., None] * (x @ W0.transpose(-1, -2)) + d[..., None] * (x @ S0.transpose(-1, -2))
    return base - (C * (x @ keys.transpose(-1, -2))) @ grads


def _chunk(state, q, k, v, coeffs, qk, theta, stats):
    """One chunk: read-outs of its b tokens and the state after it. coeffs = _decays(...) of this chunk,
    qk = q kᵀ (N, b, b), both precomputed for all chunks at once (they do not depend on the state)."""
    W1, W2, S1, S2 = state
    C, d, A, E, carry = coeffs
    h_k, r, delta = _grad_signals(W1, W2, k, v, stats, theta)
    z_q = A[..., None] * (q @ W1.transpose(-1, -2)) + d[..., None] * (q @ S1.transpose(-1, -2))
    h_q = F.silu(z_q - (C * qk) @ delta)  # hidden of M_t(q_t), (N, b, d_m)
    y = _read(W2, S2, A, d, C, h_k, r, h_q)  # (N, b, d_h)
    a_b, d_b, e_b = A[..., -1, None, None], d[..., -1, None, None], E[..., -1, None, None]
    cb, m = C[..., -1, :, None], carry[..., None]  # (N, b, 1): c_{b,i} and θ_i E_b/E_i
    M1 = a_b * W1 + d_b * S1 - (delta * cb).transpose(-1, -2) @ k
    M2 = a_b * W2 + d_b * S2 - (r * cb).transpose(-1, -2) @ h_k
    S1n = e_b * S1 - (delta * m).transpose(-1, -2) @ k
    S2n = e_b * S2 - (r * m).transpose(-1, -2) @ h_k
    return (M1, M2, S1n, S2n), y


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
    coeffs = _decays(*rates)  # every chunk at once: (N, n_chunks, b, b) and (N, n_chunks, b)
    qk = q @ k.transpose(-1, -2)  # (N, n_chunks, b, b)
    state = (W1.to(dt), W2.to(dt), torch.zeros_like(W1, dtype=dt), torch.zeros_like(W2, dtype=dt))
    outs = []
    for c in range(n // chunk):
        state, y = _chunk(state, q[:, c], k[:, c], v[:, c], [x[:, c] for x in coeffs], qk[:, c],
                          rates[2][:, c], stats)
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
