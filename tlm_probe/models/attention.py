"""Causal self-attention with grouped-query heads, an optional per-head sigmoid output gate and an optional
sliding window (Titans' MAL block attends to the last `window` tokens only). Layer l has
cfg.heads_at(l) query heads and cfg.kv_heads_at(l) key/value heads of the fixed width cfg.d_head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.hooks import edit, has_hooks
from tlm_probe.models.layers import Rotary
from tlm_probe.models.mixer_registry import MIXERS


class Attention(nn.Module):
    def __init__(self, cfg: TLMConfig, layer: int = 0, window: int = 0):
        super().__init__()
        self.window = window  # 0 = full causal attention
        self.n_heads, self.kv_heads, self.d_head = cfg.heads_at(layer), cfg.kv_heads_at(layer), cfg.d_head
        d_attn = self.n_heads * cfg.d_head
        self.W_Q = nn.Linear(cfg.d_model, d_attn, bias=False)
        self.W_K = nn.Linear(cfg.d_model, self.kv_heads * cfg.d_head, bias=False)
        self.W_V = nn.Linear(cfg.d_model, self.kv_heads * cfg.d_head, bias=False)
        self.W_O = nn.Linear(d_attn, cfg.d_model, bias=False)
        # G1 gate (Qiu et al. 2025): sigmoid(x W_G), elementwise per head, on the SDPA output
        self.W_G = nn.Linear(cfg.d_model, d_attn, bias=False) if MIXERS[cfg.mixer].output_gate else None
        self.rotary = Rotary(cfg.d_head, cfg.max_seq_len, cfg.rope_theta) if cfg.positions == "rope" else None
        self.dropout = cfg.dropout
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()  # (B, T, H, d_head)
        self.hook_z = HookPoint()  # (B, T, H, d_head), after the gate
        # (B, H, T, T_keys) pre-softmax scores (scaled, masked keys -inf) and softmax weights, as
        # TransformerLens's attn.hook_attn_scores / hook_pattern: formed only while a hook is attached (SDPA
        # never forms them); an edited score or pattern drives the output (models/hooks.py)
        self.hook_attn_scores = HookPoint()
        self.hook_pattern = HookPoint()
        if self.W_G is not None:
            self.hook_gate = HookPoint()  # (B, T, H, d_head)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, n, self.d_head)

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None, valid=None, cache=None,
        layer: int = 0,
    ) -> torch.Tensor:
        """cache: a transformers Cache (generation); this call's keys/values are appended to layer `layer`'s
        and the queries attend to all of them (mask then comes with the cached length, see tlm.py)."""
        B, T, _ = x.shape
        if self.window and self.window < T:
            mask = window_mask(positions, mask, self.window)
        q = self.hook_q(self._heads(self.W_Q(x), self.n_heads)).transpose(1, 2)  # (B, H, T, dh)
        k = self.hook_k(self._heads(self.W_K(x), self.kv_heads)).transpose(1, 2)
        v = self.hook_v(self._heads(self.W_V(x), self.kv_heads)).transpose(1, 2)
        if self.rotary is not None:
            q, k = self.rotary(q, positions), self.rotary(k, positions)
        if cache is not None:
            k, v = cache.update(k, v, layer)  # (B, H_kv, T_past + T, dh)
            # a StaticCache returns its whole preallocated length (zeros past the filled part): keep what
            # is filled, so masks and SDPA's causal rule see T_past + T keys as with a DynamicCache
            filled = int(cache.get_seq_length(layer))
            k, v = k[:, :, :filled], v[:, :, :filled]
        drop = self.dropout if self.training else 0.0
        gqa = self.kv_heads != self.n_heads
        if mask is None:
            z = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=True, enable_gqa=gqa)
        else:
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop, enable_gqa=gqa)
        if has_hooks(self.hook_attn_scores) or has_hooks(self.hook_pattern):  # form them, beside SDPA
            z = self._through_pattern_hook(q, k, v, mask, drop, z)
        z = z.transpose(1, 2)  # (B, T, H, dh)
        if self.W_G is not None:
            z = z * self.hook_gate(torch.sigmoid(self._heads(self.W_G(x), self.n_heads)))
        z = self.hook_z(z)
        return self.W_O(z.reshape(B, T, -1))

    def _through_pattern_hook(self, q, k, v, mask, drop: float, z: torch.Tensor) -> torch.Tensor:
        """SDPA's z while the hooks only read the scores and pattern (so caching everything changes no
        number); once a hook edits either (or reads its gradient), z = pattern @ V, as in TransformerLens."""
        pattern, scores_edited = self._pattern(q, k, mask)
        patched = edit(self.hook_pattern, pattern)
        if patched is None and not scores_edited:
            return z
        pattern = pattern if patched is None else patched
        v = v.repeat_interleave(self.n_heads // self.kv_heads, dim=1)  # (B, H, S, dh), as for k
        return F.dropout(pattern, drop) @ v

    def _pattern(self, q, k, mask) -> tuple[torch.Tensor, bool]:
        """The softmax weights (B, H, T, S) of the scores after hook_attn_scores (SDPA's, unless a hook
        edited the scores), and whether one did."""
        if self.kv_heads != self.n_heads:  # grouped-query: each kv head serves n_heads / kv_heads queries
            k = k.repeat_interleave(self.n_heads // self.kv_heads, dim=1)
        T, S = q.shape[-2], k.shape[-2]
        if mask is None:  # causal; with no cache T == S
            mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
        scores = ((q @ k.transpose(-2, -1)) * self.d_head**-0.5).masked_fill(~mask, float("-inf"))
        edited = edit(self.hook_attn_scores, scores)  # (B, H, T, S)
        return torch.softmax(scores if edited is None else edited, dim=-1), edited is not None


def window_mask(positions: torch.Tensor, mask: torch.Tensor | None, window: int) -> torch.Tensor:
    """(B, 1, T, T) boolean mask: causal (and padding-aware when `mask` is given) with each query seeing
    the keys fewer than `window` real tokens behind it."""
    T = positions.shape[1]
    if mask is None:
        mask = torch.ones(T, T, dtype=torch.bool, device=positions.device).tril()[None, None]
    near = (positions[:, :, None] - positions[:, None, :]) < window  # (B, T, T)
    return mask & near[:, None]
