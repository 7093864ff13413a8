"""`tlm info CHECKPOINT`: config, per-layer widths and parameter counts of a tlm checkpoint, and for a run
folder how it was trained and where (run.json: steps, validation loss, code, packages, CPU)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from tlm_probe.commands.common import command, console, print_json
from tlm_probe.commands.flags import JsonOut
from tlm_probe.commands.options import with_options
from tlm_probe.files.jsonfile import read_json_object
from tlm_probe.models.accounting import count_params, train_flops_per_token
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.config_file import CONFIG, read_tlm_config  # torch-free
from tlm_probe.models.verify import verify_checkpoint  # torch-free


def register(app: typer.Typer) -> None:
    @command(app, "info", "tlm info runs/demo/cosine")
    @with_options(run=JsonOut)
    def info(
        checkpoint: Path = typer.Argument(..., help="A tlm checkpoint folder (config.json + weights; the "
                                          "weights are checked against the config), or a config.json "
                                          "file alone (the architecture only)."),
        *,
        run: JsonOut,
    ):
        """Print a checkpoint's config, MLP widths and parameter counts, and how and where it was trained."""
        config_only = checkpoint.is_file() and checkpoint.name == CONFIG
        if config_only:
            cfg = read_tlm_config(checkpoint.parent)
        else:  # the weights' names and shapes from the safetensors header: no torch, no model code
            cfg, _ = verify_checkpoint(checkpoint)
        pc = count_params(cfg)
        uniform = _uniform(cfg)
        result = {
            "config": cfg.to_dict(),
            "layers": [{"layer": l.layer, "d_ff": l.d_ff, "attention": l.attention, "mlp": l.mlp,
                        "norms": l.norms, "total": l.total} for l in pc.layers],
            "params": pc.total,
            "non_embedding_params": pc.non_embedding,
            "train_flops_per_token": train_flops_per_token(cfg),
            "uniform_params": count_params(uniform).total,
            "uniform_train_flops_per_token": train_flops_per_token(uniform),
        }
        if not config_only and (checkpoint / "run.json").is_file():  # a `tlm train` folder
            result["run"] = read_json_object(checkpoint / "run.json")
        if run.json_out:
            print_json(result)
            return
        _print(checkpoint, cfg, result)


def _uniform(cfg: TLMConfig) -> TLMConfig:
    """The same model with every MLP at the mean width: the uniform twin a tapered model is matched to."""
    L = cfg.n_layers
    if sum(cfg.d_ff) % L:  # not from a schedule (hand-set widths): the nearest uniform twin
        return cfg.replace(d_ff=(round(cfg.mean_d_ff),) * L, schedule={})
    return cfg.replace(d_ff=(sum(cfg.d_ff) // L,) * L, schedule={})


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
    console.print(f"parameters {r['params']:,} (non-embedding {r['non_embedding_params']:,}), uniform twin "
                  f"{r['uniform_params']:,}; training FLOPs/token at T={cfg.max_seq_len}: "
                  f"{r['train_flops_per_token']:,}, uniform twin {r['uniform_train_flops_per_token']:,}")
    if "run" in r:
        console.print(trained_line(r["run"]), markup=False, highlight=False)


def trained_line(run: dict) -> str:
    """How and where a run was trained, from its run.json (runs of before versions and machine were
    recorded say so)."""
    loss = run.get("val_loss")
    how = f"trained {run.get('step', 0):,} steps, {run.get('tokens', 0):,} tokens" + (
        f", validation loss {loss:.4f}" if isinstance(loss, (int, float)) else "")
    v, m = run.get("versions"), run.get("machine")
    if not isinstance(v, dict) or not isinstance(m, dict):
        return f"{how}; where: not recorded (trained before run.json recorded versions and machine)"
    code = (v.get("tlm_probe_commit") or "")[:10] or f"tlm_probe {v.get('tlm_probe')}"
    gpu = m.get("accelerator")
    on = gpu.get("name") if isinstance(gpu, dict) else f"{m.get('cpu')} ({m.get('cpu_capability')})"
    return f"{how}; code {code}, torch {v.get('torch')}, on {on}, {m.get('threads')} thread(s)"
