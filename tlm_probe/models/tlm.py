"""The tapered language model: a pre-norm decoder whose block l has an MLP of width d_l.

Every block exposes the contract's hook names (TransformerLens conventions), so `run_with_cache` (an
ActivationCache, as HookedTransformer returns), `run_with_hooks` and `nnsight.NNsight(model)` work on it:
    resid_pre -> attn_out -> resid_mid = resid_pre + attn_out -> mlp_out -> resid_post = resid_mid + mlp_out
The token mixer (models/mixers.py: attention, gated attention, Titans, Hope-attention) always sits at
`blocks.{l}.attn` and its output is `hook_attn_out`; Hope-attention's MLP is its continuum memory.
A block with d_l = 0 has no MLP: its MLP matrices are empty and mlp_out is exactly 0 (models/mlp.py). It
keeps its pre-MLP norm ln2 (d weights whose gradient is exactly 0), so every schedule of one budget has
the same module tree, state-dict names and parameter count (models/accounting.py counts it likewise).
Norms carry hook_scale (blocks.{l}.ln1/ln2.hook_scale, ln_final.hook_scale; models/layers.py), attention
hook_attn_scores and hook_pattern (models/attention.py); model.tokenizer, to_tokens, to_string, W_U and
W_E are HookedTransformer's (models/tl_habits.py). cfg.norm_scaling = lns multiplies the output of every
pre-norm of block l (1-based) by 1/sqrt(l) (LayerNorm Scaling, models/config.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.layers import make_norm
from tlm_probe.models.mixers import make_mixer, make_mlp
from tlm_probe.models.tl_habits import TLHabits


class Block(nn.Module):
    def __init__(self, cfg: TLMConfig, layer: int):
        super().__init__()
        scale = cfg.norm_scale_at(layer)  # LayerNorm Scaling (cfg.norm_scaling): 1.0 unless lns
        self.ln1 = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps, scale)
        self.attn = make_mixer(cfg, layer)  # named `attn` whatever the mixer: the adapters' path (contract)
        self.ln2 = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps, scale)
        self.mlp = make_mlp(cfg, layer)
        self.drop = nn.Dropout(cfg.dropout)
        self.layer = layer
        self.stream_mixer = getattr(self.attn, "reads_stream", False)
        self.stream_mlp = getattr(self.mlp, "reads_stream", False)
        for name in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
            setattr(self, f"hook_{name}", HookPoint())  # each (B, T, d_model)

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None, valid=None, cache=None
    ):
        resid_pre = self.hook_resid_pre(x)
        kv = {} if cache is None else {"cache": cache, "layer": self.layer}  # a kv_cache row only (hf.py)
        if self.stream_mixer:  # residual connections inside (mixers.py): it gets the stream and ln1
            attn = self.attn(resid_pre, self.ln1, positions, mask, valid)
        else:
            attn = self.attn(self.ln1(resid_pre), positions, mask, valid, **kv)
        attn_out = self.hook_attn_out(self.drop(attn))
        resid_mid = self.hook_resid_mid(resid_pre + attn_out)
        mlp = self.mlp(resid_mid, self.ln2, valid) if self.stream_mlp else self.mlp(self.ln2(resid_mid))
        mlp_out = self.hook_mlp_out(self.drop(mlp))
        return self.hook_resid_post(resid_mid + mlp_out)


class FinalNorm(nn.Module):
    def __init__(self, cfg: TLMConfig):
        super().__init__()
        self.norm = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps)  # never depth-scaled
        del self.norm.hook_scale  # the norm's scale is hooked here, under TransformerLens's name:
        self.hook_scale = HookPoint()  # (B, T, 1) ln_final.hook_scale (models/layers.py)
        self.hook_normalized = HookPoint()  # (B, T, d_model), after the weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_normalized(self.norm(x, self.hook_scale))


class TaperedLM(TLHabits, HookedRootModule):
    def __init__(self, cfg: TLMConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_embed = nn.Embedding(cfg.max_seq_len, cfg.d_model) if cfg.positions == "learned" else None
        self.hook_embed = HookPoint()  # token embeddings W_E[ids], as TransformerLens's
        if self.pos_embed is not None:
            self.hook_pos_embed = HookPoint()  # learned position embeddings W_pos[positions]
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, l) for l in range(cfg.n_layers))
        self.ln_final = FinalNorm(cfg)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.unembed.weight = self.embed.weight
        self.apply(self._init)
        self.setup()  # HookedRootModule: index the hook points by name

    def _init(self, m: nn.Module) -> None:
        std = self.cfg.init_scale
        if isinstance(m, (nn.Linear, nn.Embedding)) and _initialisable(m.weight):
            nn.init.normal_(m.weight, 0.0, std)
        for name in ("W_O", "W_out", "W_M"):  # residual-branch outputs (W_M: Titans memory layer), as GPT-2
            out = getattr(m, name, None)
            if isinstance(out, nn.Linear) and _initialisable(out.weight):
                nn.init.normal_(out.weight, 0.0, std / math.sqrt(2 * self.cfg.n_layers))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        return_type: str = "logits",
        past_key_values=None,
    ) -> torch.Tensor:
        """input_ids (B, T) -> logits (B, T, V); with labels and return_type='loss', the mean NLL.

        attention_mask (B, T) marks real tokens; padding may sit on either side: positions count real
        tokens only and padded keys are never attended to. past_key_values: a transformers Cache holding
        the keys/values of earlier tokens (generation); attention_mask then covers those tokens too.
        """
        B, T = input_ids.shape
        past = int(past_key_values.get_seq_length()) if past_key_values is not None else 0  # Static: a tensor
        if past + T > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {past + T} exceeds max_seq_len={self.cfg.max_seq_len}")
        if past:
            positions, mask = _cached_positions_and_mask(input_ids, attention_mask, past)
        else:
            positions, mask = _positions_and_mask(input_ids, attention_mask)
        x = self.hook_embed(self.embed(input_ids))
        if self.pos_embed is not None:
            x = x + self.hook_pos_embed(self.pos_embed(positions))
        x = self.drop(x)  # (B, T, d_model)
        valid = None if attention_mask is None else attention_mask.bool()
        for block in self.blocks:
            x = block(x, positions, mask, valid, past_key_values)
        logits = self.unembed(self.ln_final(x))  # (B, T, V)
        if return_type == "loss":
            targets = input_ids if labels is None else labels
            return next_token_nll(logits, targets, attention_mask=attention_mask)
        return logits


    def run_with_cache(self, *args, return_cache_object: bool = True, **kwargs):
        """TransformerLens's run_with_cache, with HookedTransformer's return type: the cache is an
        ActivationCache (cache["resid_post", 0], cache.accumulated_resid(), ...) unless
        return_cache_object=False, which gives the plain name -> tensor dict."""
        from transformer_lens import ActivationCache

        out, cache = super().run_with_cache(*args, **kwargs)
        if not return_cache_object:
            return out, cache
        return out, ActivationCache(cache, self, has_batch_dim=not kwargs.get("remove_batch_dim", False))


def _initialisable(w: torch.Tensor) -> bool:
    """Real storage with elements: meta tensors are materialised later, and the empty matrices of a
    d_l = 0 block hold nothing (nn.init would warn about them)."""
    return w.device.type != "meta" and w.numel() > 0


def _positions_and_mask(input_ids, attention_mask):
    B, T = input_ids.shape
    if attention_mask is None:
        positions = torch.arange(T, device=input_ids.device).expand(B, T)
        return positions, None
    am = attention_mask.bool()
    positions = (am.long().cumsum(-1) - 1).clamp(min=0)
    causal = torch.ones(T, T, dtype=torch.bool, device=input_ids.device).tril()
    mask = causal[None] & am[:, None, :]  # (B, T, T): query t sees real keys <= t
    mask = mask | torch.eye(T, dtype=torch.bool, device=input_ids.device)[None]  # pads see themselves
    return positions, mask[:, None]  # (B, 1, T, T)


def _cached_positions_and_mask(input_ids, attention_mask, past: int):
    """Positions and (B, 1, T, past + T) mask for T new tokens after `past` cached ones."""
    B, T = input_ids.shape
    dev = input_ids.device
    if attention_mask is None:
        attention_mask = torch.ones(B, past + T, dtype=torch.bool, device=dev)
    am = attention_mask.bool()
    positions = (am.long().cumsum(-1) - 1).clamp(min=0)[:, -T:]
    query = torch.arange(past, past + T, device=dev)[:, None]
    causal = torch.arange(past + T, device=dev)[None, :] <= query  # (T, past + T)
    mask = (causal[None] & am[:, None, :]) | (torch.arange(past + T, device=dev)[None, :] == query)[None]
    return positions, mask[:, None]


def next_token_nll(logits: torch.Tensor, ids: torch.Tensor, *, reduction: str = "mean",
                   attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The one next-token loss: NLL (nats, float32) of ids[:, 1:] given the logits before them.

    ids (B, T); logits (B, T, V) over ids (the last position predicts nothing) or (B, T-1, V) over the
    inputs ids[:, :-1] of a training batch. reduction: mean | sum | none (a (B, T-1) tensor). Targets at
    padding (attention_mask 0) are left out of mean and sum."""
    targets = ids[:, 1:]
    if attention_mask is not None:
        targets = targets.masked_fill(~attention_mask[:, 1:].bool(), -100)
    logits = logits[:, : targets.shape[1]]  # (B, T-1, V)
    nll = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100,
                          reduction=reduction)
    return nll.view_as(targets) if reduction == "none" else nll
