"""`tlm export CHECKPOINT --gguf --out FILE.gguf` | `--hf-llama --out FOLDER`: our attention models in stock
formats, each verified by reading it back before it is renamed into place (tlm_probe/export/)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import typer

from tlm_probe.commands.common import command, console, err_console, print_json
from tlm_probe.commands.flags import JsonOut
from tlm_probe.commands.options import with_options
from tlm_probe.commands.overwrite import overwrite_help
from tlm_probe.errors import UserError
from tlm_probe.progress import importing_libraries, say


@dataclass(frozen=True, kw_only=True)
class ExportRun(JsonOut):
    """`tlm export`'s settings: the format (exactly one of gguf and hf_llama) and where it goes."""

    gguf: bool = False
    """Write one GGUF file (llama.cpp): arch llama, or deci when MLP widths or heads vary by layer
    (per-layer arrays)."""
    hf_llama: bool = False
    """Write a stock LlamaForCausalLM folder (refused where transformers cannot hold the model)."""
    out: Path
    """FILE.gguf with --gguf, a folder with --hf-llama."""
    overwrite: bool = field(default=False, metadata={"help": overwrite_help("export")})
    """See commands/overwrite.py."""

    def __post_init__(self):
        if self.gguf == self.hf_llama:
            raise UserError("give exactly one of --gguf and --hf-llama")


def register(app: typer.Typer) -> None:
    @command(app, "export", "tlm export runs/cosine --gguf --out cosine.gguf")
    @with_options(run=ExportRun)
    def export(
        checkpoint: Path = typer.Argument(..., help="A tlm checkpoint or `tlm train` run folder."),
        *,
        run: ExportRun,
    ):
        """Export a tlm attention model as GGUF or as a Hugging Face Llama checkpoint."""
        write = _export_gguf if run.gguf else _export_hf_llama
        summary = write(checkpoint, run.out, run.overwrite)
        if run.json_out:
            print_json(summary)
            return
        console.print(f"wrote {summary['out']} ({summary['format']}, {summary['detail']})", markup=False,
                      highlight=False)
        say(f"note: {summary['tokenizer']}")


def _source(checkpoint: Path):
    """The checkpoint's config, checked against its weights' header (no torch, nothing loaded yet)."""
    from tlm_probe.models.verify import verify_checkpoint

    cfg, path = verify_checkpoint(checkpoint)
    if path.suffix != ".safetensors":  # verify_checkpoint refuses pickle-only folders already
        raise UserError(f"{checkpoint}: only safetensors weights are exported")
    return cfg


def _load(checkpoint: Path):
    with importing_libraries():  # torch: after the checks; the first line within a second says so
        from tlm_probe.models.io import load_tlm
        from tlm_probe.tokenizer import load_saved_tokenizer

    return load_tlm(checkpoint), load_saved_tokenizer(checkpoint)


def _export_gguf(checkpoint: Path, out: Path, overwrite: bool) -> dict:
    from tlm_probe.export.gguf_writer import check_gguf_out, write_gguf
    from tlm_probe.export.support import check_exportable
    from tlm_probe.files.folder_lock import folder_lock
    from tlm_probe.files.out_folder import check_apart

    check_exportable(_source(checkpoint), "GGUF")
    check_apart(out, [checkpoint])
    check_gguf_out(out, overwrite)
    with folder_lock(out, file=True):
        check_gguf_out(out, overwrite)  # again under the lock: another writer may have made it meanwhile
        model, tokenizer = _load(checkpoint)
        with err_console.status(f"writing {out}"):
            summary = write_gguf(model, tokenizer, out, str(checkpoint))
    summary["detail"] = (f"arch {summary['architecture']}, {summary['tensors']} tensors, "
                         f"{summary['bytes']:,} bytes")
    return summary


def _export_hf_llama(checkpoint: Path, out: Path, overwrite: bool) -> dict:
    from transformers.utils import logging as hf_logging

    from tlm_probe.export.hf_llama import HF_FILES, build_llama, check_hf_llama, save_llama, verify_folder
    from tlm_probe.files.fileio import publish, temp_folder
    from tlm_probe.files.folder_lock import folder_lock
    from tlm_probe.files.out_folder import check_apart, claim

    check_hf_llama(_source(checkpoint))
    check_apart(out, [checkpoint])
    if not out.parent.is_dir():
        raise UserError(f"parent folder of --out does not exist: {out.parent}")
    claim(out, overwrite=overwrite, writes=HF_FILES, kind="export")
    hf_logging.disable_progress_bar()
    with folder_lock(out), temp_folder(out) as tmp, err_console.status(f"writing {out}"):
        model, tokenizer = _load(checkpoint)
        note = save_llama(build_llama(model, tokenizer), tokenizer, tmp)
        diff = verify_folder(tmp, model)
        publish(tmp, out, "export")
    return {"out": str(out), "format": "hf-llama", "tokenizer": note, "max_abs_logit_diff_float64": diff,
            "detail": f"LlamaForCausalLM, logits equal ours to {diff:.2g} in float64"}
