"""Validation on one fixed token set: summed next-token NLL / predicted-token count -> loss, perplexity,
bits per byte (NLL in bits over the UTF-8 bytes of the predicted tokens). Summed over ranks under DDP."""

from __future__ import annotations

import math

import torch

from tlm_probe.capture.finite import refuse_non_finite
from tlm_probe.models.tlm import next_token_nll
from tlm_probe.train import distributed as dist

STOPPED = "the run stopped before this validation was recorded; its checkpoints are as they were"


@torch.no_grad()
def summed_nll(model, windows: torch.Tensor, batch_size: int, device, autocast) -> tuple[float, int]:
    """(sum of NLL in nats, number of predicted tokens) over all ranks; rank r takes windows r, r+W, ...
    Every rank runs the same number of forward passes (FSDP needs them in lockstep): a rank with no
    windows left runs one window and discards it."""
    rank, world = dist.group_rank(), dist.world_size()
    mine = windows[rank::world]
    n_batches = math.ceil(math.ceil(len(windows) / world) / batch_size)
    total = torch.zeros((), dtype=torch.float64, device=device)
    count = 0
    for i in range(n_batches):
        batch = mine[i * batch_size : (i + 1) * batch_size]
        weight = 1.0 if len(batch) else 0.0
        batch = (batch if len(batch) else windows[:1]).to(device)
        with autocast():
            logits = model(batch[:, :-1])
        refuse_non_finite([(None, "validation logits", logits)], then=STOPPED)  # the one guard
        nll = next_token_nll(logits, batch, reduction="sum")
        total += weight * nll.double()
        count += int(weight) * batch[:, 1:].numel()
    return dist.sum_scalars(total, count, device)


def evaluate(model, windows, n_bytes: int | None, batch_size: int, device, autocast) -> dict:
    was_training = model.training
    model.eval()
    nll, n = summed_nll(model, windows, batch_size, device, autocast)
    model.train(was_training)
    loss = nll / n
    out = {"val_loss": loss, "val_ppl": math.exp(min(loss, 700.0)), "val_tokens": n}
    out["val_bpb"] = nll / (math.log(2) * n_bytes) if n_bytes else None
    return out
