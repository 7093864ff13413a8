"""`tlm data`: look at a data source and tokenize it into uint32 shards."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from tlm_probe.commands.common import OneLineUsage, command, console, err_console, print_json
from tlm_probe.commands.flags import JsonOut
from tlm_probe.commands.options import with_options
from tlm_probe.commands.overwrite import overwrite_help
from tlm_probe.data.options import PrepareOptions
from tlm_probe.data.sources import SOURCE_HELP, iter_documents
from tlm_probe.progress import importing_libraries


@dataclass(frozen=True, kw_only=True)
class PrepareRun(JsonOut):
    """`tlm data prepare`'s settings beside PrepareOptions: where it writes."""

    out: Path
    """Folder to write (train/, val/, tokenizer/, meta.json)."""
    overwrite: bool = field(default=False, metadata={"help": overwrite_help("data prepare")})
    """See commands/overwrite.py."""


def register(app: typer.Typer) -> None:
    data_app = typer.Typer(help="Data sources: inspect them, tokenize them into shards.",
                           no_args_is_help=True, cls=OneLineUsage)
    app.add_typer(data_app, name="data")
    _prepare(data_app)
    _info(data_app)


def _prepare(data_app: typer.Typer) -> None:
    @command(data_app, "prepare", "tlm data prepare builtin:pydoc --tokenizer bpe:4096 --out data/pydoc")
    @with_options(options=PrepareOptions, run=PrepareRun)
    def prepare_cmd(
        source: str = typer.Argument("builtin:pydoc", help=f"Data source: {SOURCE_HELP}."),
        *,
        options: PrepareOptions,
        run: PrepareRun,
    ):
        """Tokenize a source into uint32 memory-mapped shards with a header (dtype, vocab, tokenizer hash)."""
        from tlm_probe.data.prepare import check_inputs, prepare

        check_inputs(source, run.out, options, run.overwrite)
        with importing_libraries():  # every tokenizer is saved through transformers: the first line says so
            from transformers import PreTrainedTokenizerFast  # noqa: F401 (imported here to be announced)
        columns = [
            SpinnerColumn(),
            TextColumn("tokenizing {task.completed:,} documents"),
            TimeElapsedColumn(),
        ]
        with Progress(*columns, console=err_console) as bar:
            task = bar.add_task("docs", total=None)
            meta = prepare(source, run.out, options, overwrite=run.overwrite,
                           on_doc=lambda: bar.advance(task))
        if run.json_out:
            print_json(meta)
        else:
            console.print(
                f"{run.out}: train {meta['train']['tokens']:,} tokens, val {meta['val']['tokens']:,} tokens "
                f"({meta['tokenizer']}, vocab {meta['vocab_size']:,})",
                highlight=False,
            )


def _info(data_app: typer.Typer) -> None:
    @command(data_app, "info", "tlm data info builtin:pydoc --json")
    @with_options(run=JsonOut)
    def info_cmd(
        source: str = typer.Argument("builtin:pydoc", help=f"Data source: {SOURCE_HELP}."),
        *,
        run: JsonOut,
    ):
        """Count the documents and UTF-8 bytes of each split of a source."""
        result = {"source": source}
        for split in ("train", "val"):
            docs = list(iter_documents(source, split))
            result[split] = {"documents": len(docs), "bytes": sum(len(d.encode("utf-8")) for d in docs)}
        if run.json_out:
            print_json(result)
        else:
            for split in ("train", "val"):
                console.print(
                    f"{split}: {result[split]['documents']:,} documents, {result[split]['bytes']:,} bytes",
                    highlight=False,
                )
