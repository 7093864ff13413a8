"""`tlm convert llama2c MODEL.bin --tokenizer tok512.bin --out FOLDER`: another program's checkpoint as a
Hugging Face folder that every tlm command reads (tlm_probe/convert/)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import typer

from tlm_probe.commands.common import OneLineUsage, command, console, err_console, print_json
from tlm_probe.commands.flags import JsonOut
from tlm_probe.commands.options import with_options
from tlm_probe.commands.overwrite import overwrite_help
from tlm_probe.progress import importing_libraries


@dataclass(frozen=True, kw_only=True)
class Llama2cRun(JsonOut):
    """`tlm convert llama2c`'s settings."""

    tokenizer: Path
    """The checkpoint's tokenizer: llama2.c's tok*.bin (what run.c reads) or a SentencePiece .model."""
    out: Path
    """Folder to write (config.json, model.safetensors, tokenizer.model, tokenizer.json, llama2c.json)."""
    overwrite: bool = field(default=False, metadata={"help": overwrite_help("convert llama2c")})
    """See commands/overwrite.py."""


def register(app: typer.Typer) -> None:
    convert_app = typer.Typer(help="Other programs' checkpoints as Hugging Face folders that tlm reads.",
                              no_args_is_help=True, cls=OneLineUsage)
    app.add_typer(convert_app, name="convert")

    @command(convert_app, "llama2c",
             "tlm convert llama2c stories260K.bin --tokenizer tok512.bin --out stories260k")
    @with_options(run=Llama2cRun)
    def llama2c_cmd(
        checkpoint: Path = typer.Argument(..., help="A llama2.c model.bin (legacy export, as run.c reads)."),
        *,
        run: Llama2cRun,
    ):
        """Convert a llama2.c checkpoint and its tokenizer into a Hugging Face Llama folder (verified)."""
        from tlm_probe.convert.llama2c import FILES, check_llama2c_inputs, write_folder
        from tlm_probe.files.fileio import publish, temp_folder
        from tlm_probe.files.folder_lock import folder_lock
        from tlm_probe.files.out_folder import check_apart, claim

        out = run.out
        _, tok_blob = check_llama2c_inputs(checkpoint, run.tokenizer)
        check_apart(out, [checkpoint, run.tokenizer])
        claim(out, overwrite=run.overwrite, writes=FILES, kind="convert llama2c")
        with importing_libraries():  # after the checks; the first line within a second says so
            import torch  # noqa: F401 (write_folder's, imported here to be announced)
            from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()
        with folder_lock(out), temp_folder(out) as tmp, err_console.status(f"writing {out}"):
            summary = write_folder(checkpoint, tok_blob, tmp)
            publish(tmp, out, "convert llama2c")
        summary = {"out": str(out), "format": "hf-llama", **summary}
        if run.json_out:
            print_json(summary)
            return
        console.print(f"wrote {out} (LlamaForCausalLM, {summary['layers']} layers, d_model "
                      f"{summary['d_model']}, {summary['parameters']:,} parameters; weights and tokenizer "
                      "verified)", markup=False, highlight=False)
