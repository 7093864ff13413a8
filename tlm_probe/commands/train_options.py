"""The training flags that `tlm train` and `tlm compare` share, declared once (None = the config's value)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tlm_probe.data.sources import SOURCE_HELP

Config = Annotated[Path, typer.Option(help="YAML or TOML file of training options (flags override it).")]
Mixer = Annotated[str, typer.Option(
    help="Token mixer: attention | gated_attention | titans | hope_attention (default attention)."
)]
Preset = Annotated[str, typer.Option(help="Model preset: tlm-tiny, tlm-small, tlm-440m, tlm-760m, tlm-1.3b.")]
DModel = Annotated[int, typer.Option(help="Residual width (default 128).")]
Layers = Annotated[int, typer.Option(help="Number of blocks (default 4).")]
Heads = Annotated[int, typer.Option(help="Attention heads (default 4).")]
DFF = Annotated[int, typer.Option("--d-ff", help="Uniform (mean) MLP width (default 512).")]
MultipleOf = Annotated[int, typer.Option(help="Round MLP widths to a multiple of this (default 64).")]
SeqLen = Annotated[int, typer.Option(help="Training context length (default 128).")]
BatchSize = Annotated[int, typer.Option(help="Sequences per micro-batch per process (default 16).")]
GradAccum = Annotated[int, typer.Option(help="Micro-batches per optimizer step (default 1).")]
Tokens = Annotated[int, typer.Option(help="Token budget per run (used when --steps is not given).")]
LR = Annotated[float, typer.Option(help="Peak learning rate (default 3e-3).")]
Warmup = Annotated[int, typer.Option(help="Linear warmup steps (default 50).")]
EvalInterval = Annotated[int, typer.Option(help="Evaluate every N steps (default 100).")]
EvalTokens = Annotated[int, typer.Option(help="Validation tokens in the fixed eval set (default 32768).")]
Data = Annotated[str, typer.Option(help=f"Data source: {SOURCE_HELP}; or a `tlm data prepare` folder.")]
Tokenizer = Annotated[str, typer.Option(help="byte | bpe[:VOCAB] | Hugging Face tokenizer folder/name.")]
Device = Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N.")]
Threads = Annotated[int, typer.Option(help="CPU threads for PyTorch (default: all cores).")]
