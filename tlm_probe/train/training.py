"""run_training: one model from a TrainConfig into a run folder. The one entry point of `tlm train`,
compare_arms() (once per arm and seed) and the demo workflow."""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from tlm_probe.data.stream import TokenData
from tlm_probe.errors import UserError
from tlm_probe.files.fileio import DiskFull, remove_owned
from tlm_probe.progress import NotebookProgress, Phase
from tlm_probe.ranges import RANGES, refusal
from tlm_probe.train import distributed as dist
from tlm_probe.train.checkpoint import step_folders
from tlm_probe.train.config import TrainConfig
from tlm_probe.train.loop import Trainer
from tlm_probe.train.run import plan_run, writer_lock

_stderr = Console(stderr=True)  # stdout stays for results (--json)


def progress_bar(total: int, description: str, enabled: bool = True, mfu: bool = False) -> Progress:
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"),
        TextColumn("{task.fields[tps]} tok/s"),
        *([TextColumn("mfu {task.fields[mfu]}")] if mfu else []),  # only where a peak FLOP/s is known
        TimeRemainingColumn(),
    ]
    return Progress(*columns, console=_stderr, disable=not enabled, transient=False)


PLAIN_EVERY_S = 10.0  # in a log, a line at least this often...
PLAIN_LINES = 10  # ...and at every tenth of the run, whichever comes first


class PlainLines:
    """Progress for a log (stderr not a terminal, where rich draws nothing until the run ends): nanoGPT's
    habit of one plain line per interval, `train step N/M: loss X, tok/s Y, eta Zs` (`, mfu P%` after tok/s
    where a peak FLOP/s is known: the line's tok/s x FLOPs per token / peak). The first step gets a line at
    once (the run has started); the last line's tok/s is the whole run's."""

    def __init__(self, total: int, description: str, enabled: bool, step: int, tokens: int,
                 flops_per_peak: float | None = None):
        self.total, self.description, self.enabled = total, description, enabled
        self.flops_per_peak = flops_per_peak  # FLOPs per token / peak FLOP/s: MFU per token/s
        self.every = max(math.ceil(total / PLAIN_LINES), 1)
        self.t0 = self.t_line = time.perf_counter()
        self.step0, self.step_line, self.tok_line = step, None, tokens

    def update(self, step: int, loss: float, tokens: int, step_tps: float) -> None:
        now = time.perf_counter()
        first = self.step_line is None
        if not self.enabled or step >= self.total:  # the last step: finish() prints it with the run's rate
            return
        if not first and now - self.t_line < PLAIN_EVERY_S and step - self.step_line < self.every:
            return
        # the first line: the step's own rate (the interval so far holds the first evaluation)
        tps = step_tps if first else (tokens - self.tok_line) / max(now - self.t_line, 1e-9)
        eta = (self.total - step) * (now - self.t0) / max(step - self.step0, 1)
        util = "" if self.flops_per_peak is None else f", mfu {tps * self.flops_per_peak:.1%}"
        self._line(f"step {step}/{self.total}: loss {loss:.4f}, tok/s {tps:,.0f}{util}, eta {eta:.0f}s")
        self.t_line, self.step_line, self.tok_line = now, step, tokens

    def finish(self, step: int, loss: float, run_tps: float | None) -> None:
        if self.enabled:
            rate = "-" if run_tps is None else f"{run_tps:,.0f}"
            took = time.perf_counter() - self.t0
            self._line(f"step {step}/{self.total}: loss {loss:.4f}, tok/s {rate} (whole run), {took:.0f}s")

    def _line(self, text: str) -> None:
        sys.stderr.write(f"{self.description} {text}\n")
        sys.stderr.flush()  # a pipe is block-buffered: the line is for now, not for the run's end


def run_training(tc: TrainConfig, out: str | Path, *, data: TokenData | None = None, resume: bool = False,
                 overwrite: bool = False, fsdp: bool = False, stop_at: int | None = None,
                 description: str = "train") -> dict:
    """Check everything (before the first step), train, and return the run summary. The progress bar is
    drawn on rank 0 when tc.progress is set (TrainConfig(progress=False) trains quietly)."""
    if stop_at is not None:  # a library call's (the command line's parser checked it already)
        stated = RANGES["stop_at"]  # step 0 or below is never reached: it would be ignored; 1.5 truncated
        if isinstance(stop_at, bool) or not isinstance(stop_at, numbers.Integral) or stop_at not in stated:
            raise UserError(refusal("--stop-at", stated, stop_at))
        stop_at = int(stop_at)
    says = tc.progress and int(os.environ.get("RANK", "0")) == 0  # before the process group exists
    # the first phase, before the first step line: data (read or tokenized here unless given), the model
    with Phase(f"{description}: loading data {tc.data} (tokenizer {tc.tokenizer})",
               enabled=says and data is None) as phase:
        plan = plan_run(tc, out, data=data, resume=resume, overwrite=overwrite)
        phase.result = (f"{description}: data {tc.data}: {len(plan.data.train):,} training and "
                        f"{len(plan.data.val):,} validation tokens")
    with writer_lock(plan.out), _no_half_written_run(plan):
        with Phase(_setting_up(description, plan), enabled=says) as phase:
            trainer = Trainer(plan, overwrite=overwrite, fsdp=fsdp, stop_at=stop_at)
            at = f"step {trainer.step}/{trainer.total}"
            phase.result = f"{description}: model ready on {trainer.device}, {at}"
        summary = _train_shown(trainer, description, tc.progress and dist.is_main())
    summary["rank"] = dist.group_rank()
    return summary


def _train_shown(trainer: Trainer, description: str, enabled: bool) -> dict:
    """trainer.run() with its progress shown (when enabled): a bar, plain lines in a log, or an HTML line in
    a notebook; returns the run summary."""
    _announce_slow_steps(trainer, description, enabled)
    plain = not (_stderr.is_terminal or _stderr.is_jupyter)
    per_peak = trainer.flops_per_token / trainer.peak if trainer.peak else None
    lines = PlainLines(trainer.total, description, enabled and plain, trainer.step, trainer.tokens, per_peak)
    # in a notebook rich's bar wants ipywidgets (a warning per run without them): an HTML line instead
    bar = (NotebookProgress(enabled) if _stderr.is_jupyter
           else progress_bar(trainer.total, description, enabled and not plain, trainer.peak is not None))
    with bar:
        task = bar.add_task(description, total=trainer.total, completed=trainer.step, loss="-", tps="-",
                            mfu="-")
        last = {"loss": float("nan")}

        def report(p) -> None:
            loss, tps = p.last.get("train_loss", float("nan")), p.last.get("tokens_per_s", 0)
            mfu = p.last.get("mfu")  # the step's, from _train_record; absent without a peak FLOP/s
            last["loss"] = loss
            bar.update(task, completed=p.step, loss=f"{loss:.3f}", tps=f"{tps:,.0f}",
                       mfu="-" if mfu is None else f"{mfu:.1%}")
            lines.update(p.step, loss, trainer.tokens, tps)

        summary = trainer.run(report)
        run_tps = summary.get("end_to_end_tokens_per_s")  # the whole run's rate, not the last step's
        bar.update(task, tps="-" if run_tps is None else f"{run_tps:,.0f}")
        lines.finish(summary["step"], last["loss"], run_tps)
    return summary


def _setting_up(description: str, plan) -> str:
    cfg, tc = plan.cfg, plan.tc
    what = "resuming" if plan.resume else "building"
    return (f"{description}: {what} the model ({cfg.n_layers} layers, d_model {cfg.d_model}, MLP schedule "
            f"{tc.schedule}, mixer {tc.mixer})")


def _announce_slow_steps(trainer: Trainer, description: str, enabled: bool) -> None:
    """The trainer's validation passes (the first one before the first step line, the last one after the
    last) and checkpoint writes, each a progress.Phase: one that takes a while says so."""
    if not enabled:
        return
    evaluate, save = trainer.evaluate, trainer.save

    def validation() -> dict:
        with Phase(f"{description}: validation at step {trainer.step} "
                   f"({trainer.tc.eval_tokens:,} tokens)") as phase:
            record = evaluate()
            loss = record.get("val_loss", float("nan"))
            phase.result = f"{description}: validation at step {trainer.step}: loss {loss:.4f}"
        return record

    def checkpoint() -> None:
        with Phase(f"{description}: saving the checkpoint of step {trainer.step}"):
            save()

    trainer.evaluate, trainer.save = validation, checkpoint


@contextlib.contextmanager
def _no_half_written_run(plan):
    """A full disk before a new run's first checkpoint: remove what the run wrote (its manifest's
    entries, and the folder if it made it), so no half-written run folder stays; with a checkpoint on
    disk the folder stays, to be resumed."""
    existed = plan.out.exists()
    try:
        yield
    except DiskFull:
        if dist.is_main() and not plan.resume and not step_folders(plan.out):
            remove_owned(plan.out)
            if not existed and plan.out.is_dir() and not any(plan.out.iterdir()):
                plan.out.rmdir()
        raise
