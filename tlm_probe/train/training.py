"""run_training: one model from a TrainConfig into a run folder. The one entry point of `tlm train`,
compare() (once per arm and seed) and the demo workflow."""

from __future__ import annotations

import contextlib
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from tlm_probe.data.stream import TokenData
from tlm_probe.errors import UserError
from tlm_probe.fileio import DiskFull, remove_owned
from tlm_probe.train import distributed as dist
from tlm_probe.train.checkpoint import step_folders
from tlm_probe.train.config import TrainConfig
from tlm_probe.train.loop import Trainer
from tlm_probe.train.run import plan_run, writer_lock

_stderr = Console(stderr=True)  # stdout stays for results (--json)


def progress_bar(total: int, description: str, enabled: bool = True) -> Progress:
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"),
        TextColumn("{task.fields[tps]} tok/s"),
        TimeRemainingColumn(),
    ]
    return Progress(*columns, console=_stderr, disable=not enabled, transient=False)


def run_training(
    tc: TrainConfig,
    out: str | Path,
    *,
    data: TokenData | None = None,
    resume: bool = False,
    overwrite: bool = False,
    fsdp: bool = False,
    stop_at: int | None = None,
    description: str = "train",
) -> dict:
    """Check everything (before the first step), train, and return the run summary. The progress bar is
    drawn on rank 0 when tc.progress is set (TrainConfig(progress=False) trains quietly)."""
    if stop_at is not None and stop_at < 1:  # step 0 or below is never reached: it would be ignored
        raise UserError(f"--stop-at must be a step >= 1, got {stop_at}")
    plan = plan_run(tc, out, data=data, resume=resume, overwrite=overwrite)
    with writer_lock(plan.out), _no_half_written_run(plan):
        trainer = Trainer(plan, overwrite=overwrite, fsdp=fsdp, stop_at=stop_at)
        with progress_bar(trainer.total, description, tc.progress and dist.is_main()) as bar:
            task = bar.add_task(description, total=trainer.total, completed=trainer.step, loss="-", tps="-")

            def report(p) -> None:
                loss, tps = p.last.get("train_loss", float("nan")), p.last.get("tokens_per_s", 0)
                bar.update(task, completed=p.step, loss=f"{loss:.3f}", tps=f"{tps:,.0f}")

            summary = trainer.run(report)
    summary["rank"] = dist.rank()
    return summary


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
