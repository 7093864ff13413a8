"""AdamW with decoupled weight decay on matrices only, and a linear-warmup + cosine-decay learning rate."""

from __future__ import annotations

import math

import torch
from torch import nn

from tlm_probe.train.config import TrainConfig


def make_optimizer(model: nn.Module, tc: TrainConfig, device_type: str) -> torch.optim.AdamW:
    # weight decay on 2-D weights (matmuls, embeddings); not on norm gains or biases
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=tc.lr, betas=(tc.beta1, tc.beta2), fused=device_type == "cuda")


def lr_at(step: int, tc: TrainConfig, total_steps: int) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warmup, then cosine to lr·min_lr_ratio."""
    if tc.warmup and step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    span = max(1, total_steps - tc.warmup)
    progress = min(1.0, (step - tc.warmup) / span)
    floor = tc.lr * tc.min_lr_ratio
    return floor + (tc.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for g in opt.param_groups:
        g["lr"] = lr
