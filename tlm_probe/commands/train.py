"""`tlm train`: train one model from a YAML/TOML config and/or flags, or a preset, into a run folder."""

from __future__ import annotations

from pathlib import Path

import typer

from tlm_probe.commands import train_options as opt
from tlm_probe.commands.common import command, console, err_console, print_json
from tlm_probe.errors import UserError
from tlm_probe.train.config import TrainConfig, read_config_file

# CLI flag name -> TrainConfig field, for the flags whose names differ
FLAG_FIELDS = {"layers": "n_layers", "heads": "n_heads"}


def register(app: typer.Typer) -> None:
    @command(app, "train", "tlm train --schedule cosine:1.5:0.5 --steps 300 --out runs/cosine")
    def train(
        out: Path = typer.Option(..., "--out", "-o", help="Run folder to write (checkpoint + metrics)."),
        config: opt.Config = None,
        preset: opt.Preset = None,
        mixer: opt.Mixer = None,
        schedule: str = typer.Option(
            None, help="MLP width schedule, e.g. uniform, cosine:1.5:0.5, wider-early."
        ),
        d_model: opt.DModel = None,
        layers: opt.Layers = None,
        heads: opt.Heads = None,
        d_ff: opt.DFF = None,
        multiple_of: opt.MultipleOf = None,
        vocab_size: int = typer.Option(None, help="Model vocabulary (default: the tokenizer's)."),
        seq_len: opt.SeqLen = None,
        batch_size: opt.BatchSize = None,
        grad_accum: opt.GradAccum = None,
        steps: int = typer.Option(None, help="Optimizer steps."),
        tokens: opt.Tokens = None,
        lr: opt.LR = None,
        warmup: opt.Warmup = None,
        eval_interval: opt.EvalInterval = None,
        log_interval: int = typer.Option(None, help="Write a training line every N steps (default 10)."),
        eval_tokens: opt.EvalTokens = None,
        ckpt_interval: int = typer.Option(None, help="Checkpoint every N steps (default: only at the end)."),
        keep_last: int = typer.Option(None, help="Resumable checkpoints to keep (default 2)."),
        seed: int = typer.Option(None, help="Seed for initial weights and batch order (default 0)."),
        data: opt.Data = None,
        tokenizer: opt.Tokenizer = None,
        device: opt.Device = None,
        threads: opt.Threads = None,
        compile: bool = typer.Option(None, "--compile/--no-compile", help="torch.compile the model."),
        peak_flops: float = typer.Option(None, help="Peak FLOP/s of the device, for the MFU estimate."),
        fsdp: bool = typer.Option(False, "--fsdp", help="Under torchrun: shard with FSDP2 instead of DDP."),
        stop_at: int = typer.Option(None, help="Checkpoint and stop after this step (resume later)."),
        resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its checkpoint."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out folder."),
        json_out: bool = typer.Option(False, "--json", help="Print the run summary as JSON."),
    ):
        """Train one tapered (or uniform) model and write a checkpoint folder."""
        flags = {k: v for k, v in locals().items() if v is not None and k in _FLAG_NAMES}
        tc = build_config(config, flags)
        from tlm_probe.train import distributed as dist
        from tlm_probe.train.training import run_training

        summary = run_training(tc, out, resume=resume, overwrite=overwrite, fsdp=fsdp, stop_at=stop_at)
        dist.shutdown()
        _print_summary(summary, json_out)


_FLAG_NAMES = {
    "preset",
    "mixer",
    "schedule",
    "d_model",
    "layers",
    "heads",
    "d_ff",
    "multiple_of",
    "vocab_size",
    "seq_len",
    "batch_size",
    "grad_accum",
    "steps",
    "tokens",
    "lr",
    "warmup",
    "eval_interval",
    "log_interval",
    "eval_tokens",
    "ckpt_interval",
    "keep_last",
    "seed",
    "data",
    "tokenizer",
    "device",
    "threads",
    "compile",
    "peak_flops",
}


def build_config(config_file: Path | None, flags: dict) -> TrainConfig:
    """Defaults <- config file <- flags. Flags given alone with neither steps nor tokens get 300 steps."""
    options = read_config_file(config_file) if config_file else {}
    options.update({FLAG_FIELDS.get(k, k): v for k, v in flags.items()})
    for key in ("steps", "tokens"):  # 0 would mean "derive it from the other one": say so, do not guess
        if key in options and options[key] == 0 and not options.get("tokens" if key == "steps" else "steps"):
            raise UserError(f"--{key} must be >= 1, got 0 (give --steps or a --tokens budget)")
    if "steps" not in options and not options.get("tokens"):
        options["steps"] = 300
    return TrainConfig.from_dict(options)


def _print_summary(s: dict, json_out: bool) -> None:
    if s.get("rank", 0) != 0:  # under torchrun only rank 0 reports
        return
    if json_out:
        print_json(s)
    else:
        parts = [
            f"step {s['step']}/{s['total_steps']}",
            _fmt("val loss", s.get("val_loss"), ".4f"),
            _fmt("ppl", s.get("val_ppl"), ".2f"),
            _fmt("bpb", s.get("val_bpb"), ".3f"),
            _fmt("tok/s", s.get("tokens_per_s"), ",.0f"),
        ]
        console.print(f"{s['out']}: " + ", ".join(parts), highlight=False)
    if s["interrupted"]:
        err_console.print(f"stopped at step {s['step']}; checkpoint saved; continue with --resume")
        raise typer.Exit(130 if s.get("stopped_by_signal") else 0)


def _fmt(label: str, value, spec: str) -> str:
    return f"{label} {'n/a' if value is None else format(value, spec)}"
