"""`tlm train`: train one model from a YAML/TOML config and/or flags, or a preset, into a run folder."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import typer

from tlm_probe.commands.common import command, console, err_console, print_json
from tlm_probe.commands.flags import JsonOut
from tlm_probe.commands.options import MIXER_FLAGS, Config, with_config_options, with_options
from tlm_probe.commands.overwrite import overwrite_help
from tlm_probe.errors import UserError
from tlm_probe.progress import importing_libraries
from tlm_probe.train.config import ARCH_DEFAULTS, TrainConfig, read_config_file

# the TrainConfig fields `tlm train` offers as flags (type, help and default come from the dataclass)
TRAIN_FIELDS = (
    "preset", "mixer", "schedule", "heads_schedule", "kv_schedule", "mem_schedule", "d_model", "n_layers",
    "n_heads", "n_kv_heads", "d_ff", "multiple_of", "vocab_size",
    "seq_len", "batch_size", "grad_accum", "steps", "tokens", "lr", "warmup", "eval_interval", "log_interval",
    "eval_tokens", "eval_sample", "ckpt_interval", "keep_last", "seed", "data", "tokenizer", "device",
    "threads", "compile", "peak_flops", "norm_scaling", *MIXER_FLAGS,
)
# what the help states where the CLI's default is not the dataclass's (model fields: ARCH_DEFAULTS)
SHOWN = {**{k: {"default": v} for k, v in ARCH_DEFAULTS.items()},
         "steps": {"help": "Optimizer steps.", "show": "300 when neither --steps nor --tokens is given"}}


@dataclass(frozen=True, kw_only=True)
class TrainRun(JsonOut):
    """`tlm train`'s settings beside TrainConfig: where the run goes and how this process runs it."""

    out: Path
    """Run folder to write (checkpoint + metrics)."""
    fsdp: bool = False
    """Under torchrun: shard with FSDP2 instead of DDP."""
    stop_at: int | None = None
    """Checkpoint and stop after this step (resume later)."""
    resume: bool = False
    """Continue the run in --out from its checkpoint."""
    overwrite: bool = field(default=False, metadata={"help": overwrite_help("train")})
    """See commands/overwrite.py."""


def register(app: typer.Typer) -> None:
    @command(app, "train", "tlm train --schedule cosine:1.5:0.5 --steps 300 --out runs/cosine")
    @with_config_options(TrainConfig, TRAIN_FIELDS, SHOWN)
    @with_options(run=TrainRun)
    def train(config: Config = None, *, run: TrainRun, config_flags: dict):
        """Train one tapered (or uniform) model and write a checkpoint folder."""
        tc = build_config(config, config_flags)
        with importing_libraries():  # seconds of imports: the first line within a second says so
            from tlm_probe.train import distributed as dist
            from tlm_probe.train.training import run_training

        summary = run_training(tc, run.out, resume=run.resume, overwrite=run.overwrite, fsdp=run.fsdp,
                               stop_at=run.stop_at)
        dist.shutdown()
        _print_summary(summary, run.json_out)


def build_config(config_file: Path | None, flags: dict) -> TrainConfig:
    """Defaults <- config file <- flags ({field: value}). Flags given alone with neither steps nor tokens
    get 300 steps."""
    options = read_config_file(config_file) if config_file else {}
    options.update(flags)
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
            f"{s['params']:,} params ({s.get('mixer', 'attention')})",
        ]
        console.print(f"{s['out']}: " + ", ".join(parts), highlight=False)
    if s["interrupted"]:
        err_console.print(f"stopped at step {s['step']}; checkpoint saved; continue with --resume")
        raise typer.Exit(128 + (s.get("stop_signal") or 2) if s.get("stopped_by_signal") else 0)  # 130/143


def _fmt(label: str, value, spec: str) -> str:
    return f"{label} {'n/a' if value is None else format(value, spec)}"
