"""`tlm demo`: the main job for a new user; no input, no network, a few minutes on 2 CPU cores."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import typer

from tlm_probe.commands.common import command, console, err_console, interrupt_code, print_json
from tlm_probe.commands.flags import JsonOut
from tlm_probe.commands.options import MIXER_FLAGS, with_config_options, with_options
from tlm_probe.commands.overwrite import overwrite_help
from tlm_probe.progress import importing_libraries
from tlm_probe.train.config import TrainConfig

# the TrainConfig fields `tlm demo` offers (the mixer and its settings, steps, device, threads)
DEMO_FIELDS = ("mixer", "steps", "device", "threads", *MIXER_FLAGS)
_SHOWN = {"steps": {"help": "Training steps per model.", "show": "300; 20 with --quick"}}


@dataclass(frozen=True, kw_only=True)
class DemoRun(JsonOut):
    """`tlm demo`'s own settings (the model's are TrainConfig's)."""

    out: Path = Path("tlm-demo")
    """Folder to write (a comparison folder)."""
    quick: bool = False
    """A tiny model and 20 steps: seconds, for testing."""
    seeds: str = "0"
    """Comma-separated seeds (more seeds give a paired test)."""
    probe: bool = True
    """Probe both models and draw the alignment figure (--no-probe skips it)."""
    overwrite: bool = field(default=False, metadata={"help": overwrite_help("demo")})
    """See commands/overwrite.py."""


def register(app: typer.Typer) -> None:
    @command(app, "demo", "tlm demo --out demo")
    @with_config_options(TrainConfig, DEMO_FIELDS, _SHOWN)
    @with_options(run=DemoRun)
    def demo_cmd(*, run: DemoRun, config_flags: dict):
        """Train a tapered and a uniform model of equal budget, compare them and plot their alignment.

        A uniform and a cosine-tapered model on the embedded corpus, compared, with MLP-output alignment
        plotted against depth for both. Re-running continues an interrupted demo."""
        with importing_libraries():  # seconds of imports: the first line within a second says so
            from tlm_probe.train.arms import parse_seeds
            from tlm_probe.workflows.demo import run_demo

        flags = dict(config_flags)
        out = run.out
        try:
            doc = run_demo(
                out,
                quick=run.quick,
                steps=flags.pop("steps", None),
                seeds=parse_seeds(run.seeds),
                overwrite=run.overwrite,
                device=flags.pop("device", "auto"),
                probe=run.probe,
                mixer=flags.pop("mixer", "attention"),
                threads=flags.pop("threads", 0),
                mixer_settings=flags,
            )
        except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM
            err_console.print(f"interrupted; re-run the same command to continue in {out}")
            raise typer.Exit(interrupt_code(e)) from None
        if run.json_out:
            print_json(doc)
            return
        print_summary(doc, out)


def print_summary(doc: dict, out: Path) -> None:
    """The demo's closing lines, each whole however narrow the log (soft_wrap: no break mid-sentence)."""
    from tlm_probe.progress import since_start
    from tlm_probe.report.summary import MORE_SEEDS, paired_sentence

    lines = [f"{row['arm']:>16}: val loss {row['val_loss_mean']:.4f}, ppl {row['val_ppl_mean']:.2f}, "
             f"bpb {row['val_bpb_mean']:.3f}  ({row['params']:,} params)" for row in doc["summary"]]
    lines += [paired_sentence(p) for p in doc["paired"]]  # a one-pair row says it is not evidence
    if any((p.get("n_pairs") or 0) < 2 for p in doc["paired"]):
        lines.append(f"warning: {MORE_SEEDS}")
    figure = doc.get("figures_alignment") or "(not drawn)"
    lines.append(f"wrote {out} in {since_start():.0f} s; alignment vs depth: {figure}")  # start-up included
    if doc.get("figures", {}).get("paired"):
        lines.append(f"each seed's difference from uniform: {doc['figures']['paired']}")
    for line in lines:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
