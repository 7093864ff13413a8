"""`tlm generate CHECKPOINT --prompt TEXT`: continue a prompt, greedily or by sampling (seeded)."""

from __future__ import annotations

import math
import time

import typer

from tlm_probe.commands.common import DEVICE_HELP, command, console, device_option, print_json, say
from tlm_probe.errors import UserError


def register(app: typer.Typer) -> None:
    example = 'tlm generate demo/runs/cosine:1.5:0.5-s0 --prompt "Return the " --max-new-tokens 40'

    @command(app, "generate", example)
    def generate_cmd(
        model: str = typer.Argument(..., help="Checkpoint folder (ours or Hugging Face) or a .gguf file."),
        prompt: str = typer.Option(..., help="Text to continue."),
        max_new_tokens: int = typer.Option(64, help="Tokens to generate at most."),
        temperature: float = typer.Option(0.0, help="0: greedy; above 0: sample at this temperature."),
        top_p: float = typer.Option(1.0, help="Nucleus sampling threshold (with --temperature > 0)."),
        seed: int = typer.Option(0, help="Seed of the sampler."),
        no_cache: bool = typer.Option(False, "--no-cache", help="Recompute every step (no KV cache)."),
        device: str = typer.Option("auto", help=DEVICE_HELP),
        dtype: str = typer.Option("float32", help="float32 | float64 | bfloat16 | float16"),
        threads: int = typer.Option(0, help="CPU threads for PyTorch (0: PyTorch's default)."),
        json_out: bool = typer.Option(False, "--json", help="Print prompt, completion and ids as JSON."),
    ):
        """Generate text from a model (greedy by default; --temperature/--top-p sample, seeded)."""
        from tlm_probe.commands.probe import _threads
        from tlm_probe.generation import GenerateOptions, generate_text

        if not math.isfinite(temperature):  # nan passes every comparison; inf divides logits to 0 or nan
            raise UserError(f"--temperature must be a finite number >= 0, got {temperature}")
        opts = GenerateOptions(max_new_tokens, temperature, top_p, seed, not no_cache, device_option(device),
                               dtype)
        opts.check()
        started = time.perf_counter()
        with _threads(threads):
            res = generate_text(model, prompt, opts)
        res["seconds"] = round(time.perf_counter() - started, 3)
        if res["window_note"]:  # once, on stderr: stdout stays the text (or the JSON)
            say(res["window_note"])
        if json_out:
            print_json(res)
        else:
            console.print(prompt, end="", markup=False, highlight=False, style="bold")
            console.print(res["completion"], markup=False, highlight=False)
