"""Ablation hooks: replace a module's output (zero / mean / resample) or skip a whole block.

Each hook touches only a slice of rows of the batch, so several ablations run in ONE forward pass on a
batch repeated G times (see ablation_run.py): row block k carries ablation k. Module outputs may be a
tensor or a tuple whose first element is the hidden state (Hugging Face attention modules); only that
first tensor is replaced.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

ABLATION_KINDS = ("zero", "mean", "resample", "skip")


@dataclass(frozen=True)
class Ablation:
    """One intervention: `kind` applied to the output of `module` (an MLP, attention or block)."""

    name: str
    """Statistic suffix, e.g. "mlp_zero"."""
    layer: int
    module: nn.Module
    kind: str


def first_output(output) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


def with_first(output, tensor: torch.Tensor):
    return (tensor, *output[1:]) if isinstance(output, tuple) else tensor


def as_tokens(x: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Some models (OPT) flatten tokens to (B*T, d) inside a layer; view them as (B, T, d)."""
    return x.view(-1, seq_len, x.shape[-1]) if x.ndim == 2 else x


def repeat_batch(batch: dict, times: int) -> dict:
    """The batch G times over (row block k carries ablation k)."""
    return {k: v.repeat(times, *([1] * (v.dim() - 1))) if torch.is_tensor(v) else v for k, v in batch.items()}


def block_input(args: tuple, kwargs: dict) -> torch.Tensor:
    """The hidden state a block was called with (positional in our model and in transformers 5)."""
    return args[0] if args else kwargs["hidden_states"]


class Calibration:
    """Mean output and a seeded pool of output vectors of some modules, over valid tokens.

    Mean-ablation writes the mean; resample-ablation writes, for each token, a vector drawn from the pool
    (outputs of the same module on other tokens of the calibration data).
    """

    def __init__(self, pool_size: int = 1024, seed: int = 0):
        self.pool_size = pool_size
        self.gen = torch.Generator().manual_seed(seed)
        self.sums: dict[int, torch.Tensor] = {}
        self.counts: dict[int, int] = {}
        self.pools: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id -> (keys, vectors)

    def add(self, module: nn.Module, out: torch.Tensor, mask: torch.Tensor) -> None:
        key = id(module)
        v = as_tokens(out, mask.shape[1]).detach()[mask.bool()].cpu().double()  # (N, d)
        self.sums[key] = self.sums.get(key, 0) + v.sum(0)
        self.counts[key] = self.counts.get(key, 0) + v.shape[0]
        keys, vecs = self.pools.get(key, (torch.empty(0), torch.empty(0, v.shape[1])))
        keys = torch.cat([keys, torch.rand(v.shape[0], generator=self.gen)])
        order = keys.argsort()[: self.pool_size]  # bottom-k keys: a uniform sample without replacement
        self.pools[key] = (keys[order], torch.cat([vecs, v.float()])[order])

    def all_reduce_(self, modules: list[nn.Module], width: int) -> None:
        """Means are exact across ranks (sums and counts; a rank without tokens adds zeros of `width`); the
        resample pools are per rank (refused under torchrun by the engine)."""
        from tlm_probe.stats.reduce import all_reduce_

        for m in modules:
            total = self.sums.get(id(m), torch.zeros(width, dtype=torch.float64))
            self.sums[id(m)] = all_reduce_(total)
            self.counts[id(m)] = int(all_reduce_(torch.tensor([float(self.counts.get(id(m), 0))])).item())

    def mean(self, module: nn.Module) -> torch.Tensor:
        return (self.sums[id(module)] / self.counts[id(module)]).float()

    def draw(self, module: nn.Module, shape: torch.Size) -> torch.Tensor:
        vecs = self.pools[id(module)][1]
        idx = torch.randint(len(vecs), tuple(shape[:-1]), generator=self.gen)
        return vecs[idx]


@contextmanager
def calibrating(modules: list[nn.Module], calib: Calibration, mask_ref: dict):
    """Record outputs of `modules` into `calib`; mask_ref["mask"] holds the current (B, T) valid mask."""

    def hook(module, args, output):
        calib.add(module, first_output(output), mask_ref["mask"])

    handles = [m.register_forward_hook(hook) for m in modules]
    try:
        yield calib
    finally:
        for h in handles:
            h.remove()


def _replacement(ab: Ablation, out: torch.Tensor, inp: torch.Tensor | None, calib: Calibration | None):
    table: dict[str, Callable[[], torch.Tensor]] = {
        "zero": lambda: torch.zeros_like(out),
        "mean": lambda: calib.mean(ab.module).to(out).expand_as(out),
        "resample": lambda: calib.draw(ab.module, out.shape).to(out),
        "skip": lambda: inp,
    }
    return table[ab.kind]()


def _hook_for(ab: Ablation, rows: slice, calib: Calibration | None, seq_len: int):
    def hook(module, args, kwargs, output):
        out = first_output(output)
        inp = as_tokens(block_input(args, kwargs), seq_len)[rows] if ab.kind == "skip" else None
        new = as_tokens(out, seq_len).clone()
        new[rows] = _replacement(ab, new[rows], inp, calib)
        return with_first(output, new.view(out.shape))

    return hook


@contextmanager
def ablating(ablations: list[Ablation], batch_size: int, calib: Calibration | None = None, seq_len: int = 0):
    """Install ablation k on rows [k*B, (k+1)*B) of a batch repeated len(ablations) times (T = seq_len:
    needed only for modules that flatten tokens to (B*T, d))."""
    handles = []
    try:
        for k, ab in enumerate(ablations):
            if ab.kind not in ABLATION_KINDS:
                raise ValueError(f"unknown ablation kind {ab.kind!r}")
            rows = slice(k * batch_size, (k + 1) * batch_size)
            hook = _hook_for(ab, rows, calib, seq_len)
            handles.append(ab.module.register_forward_hook(hook, with_kwargs=True))
        yield
    finally:
        for h in handles:
            h.remove()
