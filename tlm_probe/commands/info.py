"""`tlm info CHECKPOINT`: config, per-layer widths and parameter counts of a tlm checkpoint."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from tlm_probe.accounting import count_params, train_flops_per_token
from tlm_probe.commands.common import command, console, print_json
from tlm_probe.errors import UserError
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.config_file import read_config_json  # torch-free


def register(app: typer.Typer) -> None:
    @command(app, "info", "tlm info runs/demo/cosine")
    def info(
        checkpoint: Path = typer.Argument(..., help="A tlm checkpoint folder (config.json + weights)."),
        json_out: bool = typer.Option(False, "--json", help="Print a JSON object instead of tables."),
    ):
        """Print a checkpoint's config, per-layer MLP widths and parameter counts."""
        raw = read_config_json(checkpoint)
        if raw.get("model_type") != "tlm":
            raise UserError(f"{checkpoint} holds a {raw.get('model_type')!r} model, not a tlm checkpoint")
        cfg = TLMConfig.from_dict(raw)
        pc = count_params(cfg)
        result = {
            "config": cfg.to_dict(),
            "layers": [{"layer": l.layer, "d_ff": l.d_ff, "attention": l.attention, "mlp": l.mlp,
                        "norms": l.norms, "total": l.total} for l in pc.layers],
            "params": pc.total,
            "non_embedding_params": pc.non_embedding,
            "train_flops_per_token": train_flops_per_token(cfg),
        }
        if json_out:
            print_json(result)
            return
        _print(checkpoint, cfg, result)


def _print(path: Path, cfg: TLMConfig, r: dict) -> None:
    top = Table(title=f"{path}", show_header=False)
    for k, v in cfg.to_dict().items():
        if k != "d_ff":
            top.add_row(k, str(v))
    console.print(top)
    layers = Table(title="layers")
    for col in ("layer", "d_ff", "attention", "mlp", "norms", "total"):
        layers.add_column(col, justify="right")
    for row in r["layers"]:
        layers.add_row(*(f"{row[c]:,}" for c in ("layer", "d_ff", "attention", "mlp", "norms", "total")))
    console.print(layers)
    console.print(f"parameters {r['params']:,} (non-embedding {r['non_embedding_params']:,}); "
                  f"training FLOPs/token at T={cfg.max_seq_len}: {r['train_flops_per_token']:,}")
