"""The numerical checks of benchmarks/gpu_train.py: bf16 autocast against float32, per-block compile against
eager, each through the trainer (train/loop.py's Trainer and its train_step) and each against a bound from
the arithmetic, stated here.

Rounding model (Higham & Mary 2019, the probabilistic one): each rounding to a format of unit roundoff u
puts a relative error of at most u on its operand, errors independent in sign, so n of them along a path
add to about sqrt(n)·u. The loss, mean of logsumexp(z) - z_target, is 2-Lipschitz in the logits' max
norm: |dL| <= 2·max|dz|.
- bf16 (u = 2^-8: 8 significant bits). Under autocast a logit's path has 4 rounded operand groups a block
  (Q/K/V input, attention output into W_O, MLP input, MLP output) and the head's 2; float32 accumulates.
  So |L_bf16 - L_fp32| <= 2·sqrt(4L + 2)·u·max|z| at the same weights. Along two free-running
  trajectories the weights differ as well; the same expression at each step is printed as the allowance
  there (an allowance, not a theorem: training can amplify a difference).
- float32 (eps = 2^-23), compile vs eager at the same weights: the kernels differ in fusion and summation
  order only. A sum of K terms is off by about sqrt(K)·eps relative, K at most the widest inner dimension
  (d_model, the widest d_ff, the sequence); 4L + 2 such sums along a path; x4 for the backward (two
  matmuls per forward one) and the loss's mean. Bound: 4·(4L + 2)·sqrt(K)·eps, relative to |L| for the
  loss and to each tensor's max |gradient| for the gradients. (The softmax's V-term sum errs by
  sqrt(V)·eps in absolute terms after the log, far below that relative to a loss near ln V.)
"""

from __future__ import annotations

import contextlib
import math
import time

import torch

from benchmarks.timing import MIN_ROUNDS, interleaved, ratio, spread
from tlm_probe.models.tlm import next_token_nll
from tlm_probe.train import compile as block_compile

U_BF16 = 2.0**-8
EPS32 = 2.0**-23
TAPER = "cosine:1.5:0.5"
COMPILE_STEPS = 3


def bf16_bound(layers: int, max_logit: float) -> float:
    return 2 * math.sqrt(4 * layers + 2) * U_BF16 * max_logit


def fp32_bound(cfg, seq_len: int) -> float:
    widest = max(cfg.d_model, max(cfg.d_ff), seq_len)
    return 4 * (4 * cfg.n_layers + 2) * math.sqrt(widest) * EPS32


def _batch(tr):
    return tr.order.micro_batch(tr.step, 0, 0, tr.tc.batch_size, 1, 1).to(tr.device)


def _bf16_autocast(tr):
    """The trainer's own autocast on CUDA; on CPU (where the trainer runs float32) CPU bf16 autocast
    stands in, so the check runs there too."""
    if tr.device.type == "cuda":
        return tr.autocast
    return lambda: torch.autocast("cpu", dtype=torch.bfloat16)


def same_weights(a, b) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.raw.parameters(), b.raw.parameters(), strict=True))


def bf16_agreement(arms, size: dict, steps: int) -> dict:
    """50 steps each of bf16 autocast and float32, same seed (same initial weights) and batches."""
    lo = arms.trainer("bf16", size, steps, warmup=10)
    hi = arms.trainer("fp32", size, steps, warmup=10)
    lo.autocast, hi.autocast = _bf16_autocast(lo), contextlib.nullcontext  # the float32 arm: no autocast
    assert same_weights(lo, hi), "same seed, different initial weights"
    layers = hi.plan.cfg.n_layers
    forced, free = [], []
    for _ in range(steps):
        batch = _batch(hi)
        with torch.no_grad():  # teacher-forced: bf16 and float32 forwards on the float32 arm's weights
            z32 = hi.model(batch[:, :-1])
            with lo.autocast():
                z16 = hi.model(batch[:, :-1])
            l32, l16 = float(next_token_nll(z32, batch)), float(next_token_nll(z16, batch))
            bound = bf16_bound(layers, float(z32.abs().max()))
            del z32, z16
        forced.append((abs(l16 - l32), bound))
        loss_hi, _ = hi.train_step()
        loss_lo, _ = lo.train_step()
        free.append((abs(loss_lo - loss_hi), bound, loss_hi))
    worst_f = max(forced, key=lambda r: r[0] / r[1])
    worst = max(free, key=lambda r: r[0] / r[1])
    return {"steps": steps, "layers": layers, "unit_roundoff": U_BF16,
            "same weights: max |loss bf16 - fp32|": max(r[0] for r in forced),
            "same weights: worst diff / bound": worst_f[0] / worst_f[1],
            "same weights: ok": all(d <= b for d, b in forced),
            "trajectories: max |loss bf16 - fp32|": max(r[0] for r in free),
            "trajectories: worst diff / allowance": worst[0] / worst[1],
            "trajectories: ok": all(d <= b for d, b, _ in free),
            "fp32 loss first, last": [free[0][2], free[-1][2]],
            "bound": "2*sqrt(4L+2)*2^-8*max|logit| (gpu_numerics.py)"}  # fmt: skip


def _loss_and_grads(tr, batch):
    tr.opt.zero_grad(set_to_none=True)
    with tr.autocast():
        loss = next_token_nll(tr.model(batch[:, :-1]), batch)
    loss.backward()
    grads = [p.grad.detach().clone() for p in tr.raw.parameters()]
    tr.opt.zero_grad(set_to_none=True)
    return float(loss.detach()), grads


def _copy_weights(dst, src) -> None:
    with torch.no_grad():
        for p, q in zip(dst.raw.parameters(), src.raw.parameters(), strict=True):
            p.copy_(q)


@contextlib.contextmanager
def _backend(name: str | None):
    old = block_compile.BACKEND
    block_compile.BACKEND = name or old
    try:
        yield
    finally:
        block_compile.BACKEND = old


def _rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |a|; max |b| where a is all zero (a gradient that must stay exactly 0)."""
    scale = float(a.abs().max())
    return float((a - b).abs().max()) / scale if scale else float(b.abs().max())


def _sync(tr) -> None:
    if tr.device.type == "cuda":
        torch.cuda.synchronize()


def _timed_step(tr) -> float:
    t = time.perf_counter()
    tr.train_step()
    _sync(tr)
    return time.perf_counter() - t


def compile_equality(arms, size: dict, backend: str | None = None) -> dict:
    """Per-block compile (--compile) against eager on a tapered model: first the real configuration's
    compile time and step times (autocast as the trainer has it), then, in float32 (no autocast on either
    arm, since fused bf16 kernels round differently from unfused ones), loss and every gradient at the same
    weights for COMPILE_STEPS steps."""
    with _backend(backend):
        eager = arms.trainer("eager", size, 20, schedule=TAPER)
        comp = arms.trainer("compiled", size, 20, schedule=TAPER, compile=True)
        assert same_weights(eager, comp), "same seed, different initial weights"
        first_eager, first_comp = _timed_step(eager), _timed_step(comp)  # the compiled one compiles here
        steps = {"eager": lambda: _timed_step(eager), "compiled": lambda: _timed_step(comp)}
        t = interleaved(steps, MIN_ROUNDS)
        out = {"backend": block_compile.BACKEND, "d_ff": list(comp.plan.cfg.d_ff),
               "block shapes (graphs)": comp.compiled_shapes,
               "first step s, compiled / eager": [first_comp, first_eager],
               "compile s (first compiled step - an eager one)": first_comp - spread(t["eager"])["median"],
               "step s eager": spread(t["eager"]), "step s compiled": spread(t["compiled"]),
               "step time, compiled / eager": ratio(t, "compiled", "eager")}  # fmt: skip
        eager.autocast = comp.autocast = contextlib.nullcontext
        bound = fp32_bound(comp.plan.cfg, comp.tc.seq_len)
        loss_rel, grad_rel = 0.0, 0.0
        for _ in range(COMPILE_STEPS):
            _copy_weights(comp, eager)
            batch = _batch(eager)
            le, ge = _loss_and_grads(eager, batch)
            lc, gc = _loss_and_grads(comp, batch)
            loss_rel = max(loss_rel, abs(lc - le) / abs(le))
            grad_rel = max(grad_rel, *(_rel_diff(a, b) for a, b in zip(ge, gc, strict=True)))
            for tr in (eager, comp):
                tr.train_step()  # the real step on both; the next round copies the weights again
    out.update({"float32 steps": COMPILE_STEPS, "max |loss diff| / |loss|": loss_rel,
                "max |grad diff| / max |grad| (per tensor)": grad_rel, "bound (relative)": bound,
                "ok": loss_rel <= bound and grad_rel <= bound})  # fmt: skip
    return out
