"""`tlm demo`: the main job for a new user; no input, no network, a few minutes on 2 CPU cores."""

from __future__ import annotations

from pathlib import Path

import typer

from tlm_probe.commands.common import command, console, err_console, interrupt_code, print_json
from tlm_probe.commands.config_options import MIXER_FIELDS, with_config_options
from tlm_probe.commands.overwrite import overwrite_option
from tlm_probe.train.config import TrainConfig


def register(app: typer.Typer) -> None:
    @command(app, "demo", "tlm demo --out demo")
    @with_config_options(TrainConfig, MIXER_FIELDS)
    def demo_cmd(
        out: Path = typer.Option(
            Path("tlm-demo"), "--out", "-o", help="Folder to write (a comparison folder)."
        ),
        steps: int = typer.Option(None, help="Training steps per model.",
                                   show_default="300; 20 with --quick"),
        quick: bool = typer.Option(False, "--quick", help="A tiny model and 20 steps: seconds, for testing."),
        seeds: str = typer.Option("0", help="Comma-separated seeds (more seeds give a paired test)."),
        mixer: str = typer.Option(
            "attention", help="Token mixer: attention | gated_attention | titans | hope_attention."
        ),
        device: str = typer.Option("auto", help="auto | cpu | cuda."),
        threads: int = typer.Option(0, help="CPU threads (0: all cores; 1 is faster on a busy machine)."),
        no_probe: bool = typer.Option(False, "--no-probe", help="Skip probing and the alignment figure."),
        overwrite: bool = overwrite_option("demo"),
        json_out: bool = typer.Option(False, "--json", help="Print demo.json to stdout."),
        *,
        config_flags: dict,
    ):
        """Train a uniform and a cosine-tapered model of equal budget on the embedded corpus, compare them,
        and plot MLP-output alignment against depth for both. Re-running continues an interrupted demo."""
        from tlm_probe.train.compare import parse_seeds
        from tlm_probe.workflows.demo import run_demo

        try:
            doc = run_demo(
                out,
                quick=quick,
                steps=steps,
                seeds=parse_seeds(seeds),
                overwrite=overwrite,
                device=device,
                probe=not no_probe,
                mixer=mixer,
                threads=threads,
                mixer_settings=config_flags,
            )
        except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM
            err_console.print(f"interrupted; re-run the same command to continue in {out}")
            raise typer.Exit(interrupt_code(e)) from None
        if json_out:
            print_json(doc)
            return
        for row in doc["summary"]:
            console.print(
                f"{row['arm']:>16}: val loss {row['val_loss_mean']:.4f}, ppl {row['val_ppl_mean']:.2f}, "
                f"bpb {row['val_bpb_mean']:.3f}  ({row['params']:,} params)",
                highlight=False,
            )
        from tlm_probe.report.summary import NOT_EVIDENCE, paired_sentence

        for p in doc["paired"]:
            console.print(paired_sentence(p), highlight=False, markup=False)
        if any((p.get("n_pairs") or 0) < 2 for p in doc["paired"]):
            console.print(f"warning: {NOT_EVIDENCE}", highlight=False, markup=False)
        figure = doc.get("figures_alignment") or "(not drawn)"
        console.print(
            f"wrote {out} in {doc['wall_seconds']:.0f} s; alignment vs depth: {figure}", highlight=False
        )
