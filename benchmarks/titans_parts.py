"""Titans: the chunk-parallel memory against its token-by-token reference, and where a Titans step goes.

Both measurements run on what the benchmark's Titans model computes at init, captured in one forward of its
batch: block 0's memory inputs (q, k, v, the rates from its own rate logits, its initial weights) and the
inputs of block 0's memory layer, sliding-window attention and MLP. Not random inputs: random rate logits
make α ≈ 0.5 (the memory forgets half of itself every token, where the model starts at α ≈ 0.02), its
weights decay to float32 denormals within a few chunks, and CPU arithmetic on denormals is several times
slower (torch.set_flush_denormal(True) took the same run from 220 to 90 ms CPU time). Each part's upstream
gradient is a fixed dense random tensor, as the model's next layer gives it; the gradient of y.sum() is a
stride-0 tensor, which CPU bmm handles up to 10x slower than a dense one.

Memory: forward+backward of memory_chunked and of memory_reference, interleaved (one call of each per
round, order rotated), reported as the median over rounds of the per-round ratio, with its min and max.
Breakdown: forward+backward of each part of one block, in the same interleaved rounds as the whole
training step (forward, loss, backward), times n_layers:
    memory update       memory_chunked: the inner-loop update and read-out of every head's memory
    memory projections  the rest of the memory layer (q/k/v, convolution, rates, gate, norm, W_M)
    attention (SWA)     the sliding-window attention on its normalised input
    MLP                 the block's MLP on its normalised input
    other               step − the above: embedding, norms, residual adds, unembedding and loss
Each part runs in isolation (its own forward and backward), so the parts carry fixed costs the step pays
once; on a loaded machine 'other' can come out slightly negative, which then means "within noise of 0".
"""

from __future__ import annotations

import statistics
from contextlib import contextmanager

import torch

import tlm_probe.models.titans as titans_module
from benchmarks import timing
from tlm_probe.models.memory import memory_chunked, memory_reference


@contextmanager
def _captured(model):
    """Record the inputs of block 0's memory loop, memory layer, SWA and MLP during one forward."""
    block, seen = model.blocks[0], {}
    layer = block.attn

    def loop(*args, **kw):
        seen.setdefault("loop", (args, kw))
        return memory_chunked(*args, **kw)

    def mem_layer(x, valid, _orig=layer.memory_layer):
        seen.setdefault("mem_layer", (x, valid))
        return _orig(x, valid)

    def recorder(name):
        def hook(module, args):
            seen.setdefault(name, args)
        return hook

    hooks = [layer.swa.register_forward_pre_hook(recorder("swa")),
             block.mlp.register_forward_pre_hook(recorder("mlp"))]
    titans_module.memory_chunked, layer.memory_layer = loop, mem_layer
    try:
        yield seen
    finally:
        titans_module.memory_chunked = memory_chunked
        del layer.memory_layer  # the instance attribute; the class method shows through again
        for h in hooks:
            h.remove()


def _sync(t: torch.Tensor) -> None:
    if t.is_cuda:  # time the kernels, not their launch
        torch.cuda.synchronize(t.device)


def _leaf(t):
    return t.detach().clone().requires_grad_() if torch.is_tensor(t) and t.is_floating_point() else t


def _fwd_bwd(fn, args, kw=None):
    """A callable running fn on fresh leaf copies of args, then backward with a fixed dense gradient."""
    args = [_leaf(a) for a in args]
    kw = kw or {}
    grad = torch.randn_like(fn(*args, **kw)).detach()

    def run():
        for a in args:
            if torch.is_tensor(a):
                a.grad = None
        fn(*args, **kw).backward(grad)
        _sync(grad)

    return run


def _parts(model, x) -> dict:
    with _captured(model) as seen:
        model(x, return_type="loss")
    layer, block = model.blocks[0].attn, model.blocks[0]
    loop_args, loop_kw = seen["loop"]
    loop_kw = {k: v for k, v in loop_kw.items() if k != "stats"}
    return {"memory_update": _fwd_bwd(memory_chunked, loop_args, loop_kw),
            "memory_reference": _fwd_bwd(memory_reference, loop_args, loop_kw),
            "memory_layer": _fwd_bwd(layer.memory_layer, seen["mem_layer"]),
            "attention_swa": _fwd_bwd(layer.swa, seen["swa"]),
            "mlp": _fwd_bwd(block.mlp, seen["mlp"])}


def bench_titans(model, x, rounds: int, memory_rounds: int) -> dict:
    """model: a Titans TaperedLM in train mode; x: its benchmark batch (B, T)."""
    torch.manual_seed(0)
    parts = _parts(model, x)

    def step():
        model.zero_grad(set_to_none=True)
        model(x, return_type="loss").backward()
        _sync(x)

    mem = timing.interleaved({k: parts[k] for k in ("memory_update", "memory_reference")}, memory_rounds)
    step_parts = {"step": step, **{k: parts[k] for k in ("memory_update", "memory_layer", "attention_swa",
                                                         "mlp")}}
    times = timing.interleaved(step_parts, rounds)
    med = {k: statistics.median(v) for k, v in times.items()}
    L = model.cfg.n_layers
    per_step = {"memory update": L * med["memory_update"],
                "memory projections": L * (med["memory_layer"] - med["memory_update"]),
                "attention (SWA)": L * med["attention_swa"], "MLP": L * med["mlp"]}
    per_step["other"] = med["step"] - sum(per_step.values())
    return {"memory": {"speedup": timing.ratio(mem, "memory_reference", "memory_update"),
                       "chunked_s": statistics.median(mem["memory_update"]),
                       "reference_s": statistics.median(mem["memory_reference"]),
                       "chunk": model.cfg.mem_chunk, "tokens": x.shape[1],
                       "memories": x.shape[0] * model.cfg.n_heads},
            "breakdown_s": per_step, "step_s": med["step"],
            "breakdown_share": {k: v / med["step"] for k, v in per_step.items()}}
