"""`tlm generate CHECKPOINT --prompt TEXT`: continue a prompt, greedily or by sampling (seeded)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import typer

from tlm_probe.commands.common import command, console, device_option, print_json
from tlm_probe.commands.flags import JsonOut, Threads
from tlm_probe.commands.options import with_options
from tlm_probe.generation import GenerateOptions
from tlm_probe.progress import importing_libraries, say


@dataclass(frozen=True, kw_only=True)
class GenerateRun(Threads, JsonOut):
    """`tlm generate`'s settings beside GenerateOptions: the prompt, threads, JSON output."""

    prompt: str
    """Text to continue."""
    json_out: bool = field(default=False, metadata={"help": "Print prompt, completion and ids as JSON."})
    """JsonOut's flag; its help says what generate prints (text, not a table)."""


def register(app: typer.Typer) -> None:
    example = 'tlm generate demo/runs/cosine:1.5:0.5-s0 --prompt "Return the " --max-new-tokens 40'

    @command(app, "generate", example)
    @with_options(options=GenerateOptions, run=GenerateRun)
    def generate_cmd(
        model: str = typer.Argument(..., help="Checkpoint folder (ours or Hugging Face) or a .gguf file."),
        *,
        options: GenerateOptions,
        run: GenerateRun,
    ):
        """Generate text from a model (greedy by default; --temperature/--top-p sample, seeded)."""
        from tlm_probe.capture.model_source import check_model_source

        check_model_source(model, device_map=options.device_map)
        options.check()  # a bad option is refused before the imports below
        with importing_libraries():  # torch: after the checks; the first line within a second says so
            from tlm_probe import generation
            from tlm_probe.commands.probe import import_loaders
            from tlm_probe.threads import torch_threads

            opts = replace(options, device=device_option(options.device))
            import_loaders(model)  # the libraries first: a quick load stays quiet (progress.Phase)
        started = time.perf_counter()
        with torch_threads(run.threads):  # a slow load says so on stderr (the loaders' progress.Phase)
            res = generation.generate_text(model, run.prompt, opts)
        res["seconds"] = round(time.perf_counter() - started, 3)
        if res["window_note"]:  # once, on stderr: stdout stays the text (or the JSON)
            say(res["window_note"])
        if run.json_out:
            print_json(res)
        else:
            console.print(run.prompt, end="", markup=False, highlight=False, style="bold")
            console.print(res["completion"], markup=False, highlight=False)
