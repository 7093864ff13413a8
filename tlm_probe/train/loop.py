"""The training loop: AdamW, warmup + cosine, clipping, accumulation, fixed-step evaluation, atomic
checkpoints, exact resume, Ctrl-C -> checkpoint and clean exit, DDP/FSDP2 under torchrun."""

from __future__ import annotations

import contextlib
import json
import math
import signal
import time
from dataclasses import dataclass, field

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from tlm_probe.capture.finite import refuse_non_finite_weights
from tlm_probe.data.stream import BatchOrder, eval_documents, eval_windows, target_bytes
from tlm_probe.environment import machine, versions
from tlm_probe.errors import Interrupted, UserError
from tlm_probe.files.fileio import atomic_write_text
from tlm_probe.models.accounting import count_params, train_flops_per_token
from tlm_probe.models.device import resolve_device
from tlm_probe.models.io import save_tlm
from tlm_probe.models.mixers import training_hooks
from tlm_probe.models.tlm import TaperedLM, next_token_nll
from tlm_probe.train import checkpoint
from tlm_probe.train import distributed as dist
from tlm_probe.train.compile import compile_blocks
from tlm_probe.train.explosion import LossGuard
from tlm_probe.train.metrics import MetricsLog
from tlm_probe.train.optim import lr_at, make_optimizer, set_lr
from tlm_probe.train.run import RunPlan, prepare_folder

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)
LOAD = StateDictOptions(full_state_dict=True, strict=False)
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 70e12, "4090": 165e12}
"""Dense bf16 peak FLOP/s by GPU name fragment, for the MFU guess when --peak-flops is not given."""


def peak_flops(given: float, device: torch.device) -> float | None:
    """--peak-flops; else on a CPU its measured matmul peak (train/cpu_peak.py); else the GPU table's."""
    if given > 0:
        return given
    if device.type == "cpu":
        from tlm_probe.train.cpu_peak import cpu_peak_flops

        return cpu_peak_flops()
    if device.type != "cuda":
        return None
    gpu = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_FLOPS.items() if k in gpu), None)


@dataclass
class Progress:
    """What the loop reports to its caller (the CLI draws the progress bar from it)."""

    total: int
    step: int = 0
    last: dict = field(default_factory=dict)


class Trainer:
    def __init__(
        self, plan: RunPlan, *, overwrite: bool = False, fsdp: bool = False, stop_at: int | None = None
    ):
        self.plan, self.tc, self.stop_at = plan, plan.tc, stop_at
        device = resolve_device(self.tc.device)
        self.device = dist.init(device.type) or device
        self.world, self.rank = dist.world_size(), dist.group_rank()
        if dist.is_main():
            prepare_folder(plan, overwrite)
        dist.barrier()
        self.total = self.tc.total_steps(self.world)
        self.order = BatchOrder(plan.data.train, self.tc.seq_len, self.tc.seed)
        self.eval_set = eval_windows(plan.data.val, self.tc.seq_len, self.tc.eval_tokens,
                                     self.tc.eval_sample)
        docs = eval_documents(plan.data.val, self.tc.seq_len, self.tc.eval_tokens, plan.data.tokenizer,
                              self.tc.eval_sample)
        self.eval_docs = {"val_documents": docs[0], "val_documents_split": docs[1]} if docs else {}
        self.eval_bytes = target_bytes(self.eval_set, plan.data.tokenizer)
        self.flops_per_token = train_flops_per_token(plan.cfg, self.tc.seq_len)
        self.peak = peak_flops(self.tc.peak_flops, self.device)
        self.log = MetricsLog(plan.out, dist.is_main())
        self._build(fsdp)
        if stop_at is not None and stop_at <= self.step:  # resumed past it: the loop would never stop
            raise UserError(f"--stop-at {stop_at} is not after step {self.step}, where the run resumes")
        self.stop_requested = False
        self.stop_signal = 0  # which signal asked to stop: the exit code is 128 + it
        self.rates: list[float] = []

    # ---- set-up -----------------------------------------------------------------------------------
    def _build(self, fsdp: bool) -> None:
        torch.manual_seed(self.tc.seed)  # same initial weights for the same seed and config
        raw = TaperedLM(self.plan.cfg).to(self.device).train()
        self.raw = dist.wrap_fsdp(raw) if fsdp and dist.active() else raw
        self.opt = make_optimizer(self.raw, self.tc, self.device.type)
        self.hooks = training_hooks(self.plan.cfg, raw, fsdp and dist.active())  # the mixer row's
        self.step, self.tokens = 0, 0
        self.guard = LossGuard(self.plan.cfg.vocab_size)  # a finite loss that explodes is divergence too
        if self.plan.resume:
            model_sd, optim_sd, restored = checkpoint.load_state(self.plan.out)
            set_state_dict(
                self.raw, self.opt, model_state_dict=model_sd, optim_state_dict=optim_sd, options=LOAD
            )
            # the one guard (capture/finite.py): a damaged checkpoint is not "diverged at step N+1"
            refuse_non_finite_weights(self.raw.named_parameters(), str(self.plan.out))
            self.step, self.tokens = restored.step, restored.tokens
            self.hooks.load_state_dict(restored.extra)
            self.guard.load_state_dict(restored.extra.get("loss_guard", {}))
            self.log.truncate_after(self.step)
        use_ddp = dist.active() and not fsdp
        self.model = dist.wrap_ddp(self.raw, self.device) if use_ddp else self.raw
        # per block, in place (train/compile.py): one graph per block shape, state-dict names unchanged
        self.compiled_shapes = compile_blocks(self.raw) if self.tc.compile else 0

    def autocast(self):
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # ---- one optimizer step -----------------------------------------------------------------------
    def train_step(self) -> tuple[float, float]:
        """Forward/backward over grad_accum micro-batches, clip, update; (global mean loss, grad norm)."""
        tc = self.tc
        set_lr(self.opt, lr_at(self.step, tc, self.total))
        loss_sum = torch.zeros((), device=self.device)
        for micro in range(tc.grad_accum):
            batch = self.order.micro_batch(
                self.step, micro, self.rank, tc.batch_size, tc.grad_accum, self.world
            )
            batch = batch.to(self.device, non_blocking=True)
            last = micro == tc.grad_accum - 1
            sync = (
                contextlib.nullcontext()
                if last or not hasattr(self.model, "no_sync")
                else self.model.no_sync()
            )
            with sync, self.autocast():
                loss = next_token_nll(self.model(batch[:, :-1]), batch) / tc.grad_accum
            loss.backward()
            loss_sum += loss.detach()
        norm = torch.nn.utils.clip_grad_norm_(self.raw.parameters(), tc.grad_clip)
        mean_loss = dist.mean_scalar(loss_sum)
        gnorm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        if not (math.isfinite(mean_loss) and math.isfinite(gnorm)):  # same values on every rank
            raise self.diverged(f"loss {mean_loss:.4g}, gradient norm {gnorm:.4g}")
        exploded = self.guard.check(mean_loss)
        if exploded:
            raise self.diverged(exploded)
        self.hooks.before_step(self.step + 1)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.step += 1
        self.tokens += tc.tokens_per_step * self.world
        return mean_loss, gnorm

    def diverged(self, what: str, step: int | None = None) -> UserError:
        """Training blew up: no checkpoint is written (the last one on disk is finite), exit 1."""
        step = self.step + 1 if step is None else step
        last = checkpoint.step_folders(self.plan.out)
        kept = f"the last finite checkpoint is {last[-1]}" if last else "no checkpoint was written"
        self.log.write({"kind": "diverged", "step": step, "detail": what})
        return UserError(f"training diverged at step {step} ({what}); {kept}; "
                         f"try a lower --lr (now {self.tc.lr:g}) or a longer --warmup")

    # ---- evaluation and checkpoints ----------------------------------------------------------------
    def evaluate(self) -> dict:
        from tlm_probe.train.evaluate import evaluate

        raw_eval = self.raw
        out = evaluate(
            raw_eval, self.eval_set, self.eval_bytes, self.tc.batch_size, self.device, self.autocast
        )
        record = {"kind": "eval", "step": self.step, "tokens": self.tokens, **out, **self.eval_docs}
        self.log.write(record)
        return record

    def save(self) -> None:
        bad = [n for n, p in self.raw.named_parameters() if not torch.isfinite(p).all()]
        if bad:  # an update with finite loss and gradients can still overflow a weight
            raise self.diverged(f"non-finite weights in {bad[0]}")
        model_sd, optim_sd = get_state_dict(self.raw, self.opt, options=FULL)
        if dist.is_main():
            extra = {"loss_guard": self.guard.state_dict(), **self.hooks.state_dict()}
            checkpoint.save_state(
                self.plan.out, model_sd, optim_sd, self.step, self.tokens, self.tc.keep_last, extra
            )
            cpu = TaperedLM(self.plan.cfg)
            cpu.load_state_dict(model_sd)
            save_tlm(cpu, self.plan.out)
        dist.barrier()

    # ---- the loop ---------------------------------------------------------------------------------
    def run(self, report=None) -> dict:
        """Train to the end (or to stop_at / Ctrl-C); returns the run summary. `report(Progress)` is
        called after every step (the CLI's progress bar)."""
        # Ctrl-C (SIGINT) and a scheduler's preemption notice (SIGTERM) both mean: checkpoint, then stop
        stops = (signal.SIGINT, signal.SIGTERM)
        previous = {s: signal.signal(s, self._on_sigint) for s in stops} if _main_thread() else {}
        threads = torch.get_num_threads()
        if self.tc.threads:  # for this run only: a library call leaves the caller's setting as it was
            torch.set_num_threads(self.tc.threads)
        try:
            return self._loop(report)
        finally:
            torch.set_num_threads(threads)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_sigint(self, signum, frame) -> None:
        if self.stop_requested:  # a second Ctrl-C: stop now, without a checkpoint
            raise Interrupted(signum)
        self.stop_requested, self.stop_signal = True, signum

    def _loop(self, report) -> dict:
        tc, progress = self.tc, Progress(self.total, self.step)
        t_start, t_mark, tok_mark, last_eval = time.perf_counter(), time.perf_counter(), self.tokens, {}
        self.tokens_at_start = self.tokens  # for the end-to-end rate (evaluations and checkpoints included)
        if self.step == 0:
            last_eval = self.evaluate()
        else:  # resumed: the newest evaluation so far stands until the next one
            from tlm_probe.results import read_metrics

            evals = [m for m in read_metrics(self.plan.out) if m.get("kind") == "eval"]
            last_eval = evals[-1] if evals else {}
        interrupted = False
        while self.step < self.total:
            loss, gnorm = self.train_step()
            now = time.perf_counter()
            tps = (self.tokens - tok_mark) / max(now - t_mark, 1e-9)
            self.rates.append(tps)
            record = self._train_record(loss, gnorm, tps)
            if self.step % tc.log_interval == 0 or self.step == self.total:
                self.log.write({**record, **self.hooks.log()})  # the mixer's fields (may sync the device)
            if self.step % tc.eval_interval == 0 or self.step == self.total:
                last_eval = self.evaluate()
            due = tc.ckpt_interval and self.step % tc.ckpt_interval == 0 and self.step != self.total
            if due and not self.guard.rising:  # weights whose loss is exploding are no checkpoint to keep
                self.save()
            progress.step, progress.last = self.step, {**record, **last_eval}
            if report:
                report(progress)
            t_mark, tok_mark = time.perf_counter(), self.tokens
            if dist.broadcast_flag(self.stop_requested, self.device) or self.step == self.stop_at:
                interrupted = self.step < self.total
                break
        if self.guard.rising and not interrupted:  # the run ends exploded, short of the window
            raise self.diverged(self.guard.describe(progress.last.get("train_loss", math.nan)), self.step)
        self.save()
        return self._summary(last_eval, time.perf_counter() - t_start, interrupted)

    def _train_record(self, loss: float, gnorm: float, tps: float) -> dict:
        rec = {
            "kind": "train",
            "step": self.step,
            "tokens": self.tokens,
            "train_loss": loss,
            "lr": self.opt.param_groups[0]["lr"],
            "grad_norm": gnorm,
            "tokens_per_s": tps,
        }
        if self.peak:
            rec["mfu"] = tps * self.flops_per_token / self.peak
        return rec

    def _summary(self, last_eval: dict, wall: float, interrupted: bool) -> dict:
        rates = self.rates[1:] or self.rates  # the first step pays for warm-up (allocation, compiling)
        tps = sorted(rates)[len(rates) // 2] if rates else None
        summary = {
            "out": str(self.plan.out),
            "step": self.step,
            "total_steps": self.total,
            "tokens": self.tokens,
            "interrupted": interrupted,
            "stopped_by_signal": self.stop_requested,
            "stop_signal": self.stop_signal,
            "wall_s": wall,
            "world_size": self.world,
            "params": count_params(self.plan.cfg).total,
            "flops_per_token": self.flops_per_token,
            "tokens_per_s": tps,  # the training step only
            "peak_flops": self.peak,  # --peak-flops, the CPU's measured matmul peak, or the GPU table's
            "mfu": tps * self.flops_per_token / self.peak if self.peak and tps else None,  # of the step rate
            "end_to_end_tokens_per_s": (self.tokens - self.tokens_at_start) / wall if wall > 0 else None,
            "d_ff": list(self.plan.cfg.d_ff),
            "schedule": self.tc.schedule,
            "mixer": self.plan.cfg.mixer,
            "seed": self.tc.seed,
            **{k: last_eval.get(k) for k in ("val_loss", "val_ppl", "val_bpb", "val_tokens",
                                             "val_documents")},
            "versions": versions(),  # the code (commit) and packages that trained it
            "machine": machine(str(self.device)),  # the CPU's kernels and accelerator: what bit-for-bit needs
        }
        if dist.is_main() and not interrupted:
            atomic_write_text(self.plan.out / "run.json", json.dumps(summary, indent=2) + "\n")
        return summary


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
