"""`tlm data`: look at a data source and tokenize it into uint32 shards."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from tlm_probe.commands.common import command, console, err_console, print_json
from tlm_probe.commands.overwrite import overwrite_option
from tlm_probe.data.sources import SOURCE_HELP, iter_documents


def register(app: typer.Typer) -> None:
    data_app = typer.Typer(
        help="Data sources: inspect them, tokenize them into shards.", no_args_is_help=True
    )
    app.add_typer(data_app, name="data")

    @command(data_app, "prepare", "tlm data prepare builtin:pydoc --tokenizer bpe:4096 --out data/pydoc")
    def prepare_cmd(
        source: str = typer.Argument("builtin:pydoc", help=f"Data source: {SOURCE_HELP}."),
        out: Path = typer.Option(
            ..., "--out", "-o", help="Folder to write (train/, val/, tokenizer/, meta.json)."
        ),
        tokenizer: str = typer.Option(
            "byte", help="byte | bpe[:VOCAB] | Hugging Face tokenizer folder/name."
        ),
        shard_tokens: int = typer.Option(100_000_000, help="Tokens per shard file."),
        overwrite: bool = overwrite_option("data prepare"),
        json_out: bool = typer.Option(False, "--json", help="Print meta.json to stdout."),
    ):
        """Tokenize a source into uint32 memory-mapped shards with a header (dtype, vocab, tokenizer hash)."""
        from tlm_probe.data.prepare import check_inputs, prepare

        check_inputs(source, out, tokenizer, shard_tokens, overwrite)
        columns = [
            SpinnerColumn(),
            TextColumn("tokenizing {task.completed:,} documents"),
            TimeElapsedColumn(),
        ]
        with Progress(*columns, console=err_console) as bar:
            task = bar.add_task("docs", total=None)
            meta = prepare(source, out, tokenizer, shard_tokens, overwrite, lambda: bar.advance(task))
        if json_out:
            print_json(meta)
        else:
            console.print(
                f"{out}: train {meta['train']['tokens']:,} tokens, val {meta['val']['tokens']:,} tokens "
                f"({meta['tokenizer']}, vocab {meta['vocab_size']:,})",
                highlight=False,
            )

    @command(data_app, "info", "tlm data info builtin:pydoc --json")
    def info_cmd(
        source: str = typer.Argument("builtin:pydoc", help=f"Data source: {SOURCE_HELP}."),
        json_out: bool = typer.Option(False, "--json", help="Print a JSON object."),
    ):
        """Count the documents and UTF-8 bytes of each split of a source."""
        result = {"source": source}
        for split in ("train", "val"):
            docs = list(iter_documents(source, split))
            result[split] = {"documents": len(docs), "bytes": sum(len(d.encode("utf-8")) for d in docs)}
        if json_out:
            print_json(result)
        else:
            for split in ("train", "val"):
                console.print(
                    f"{split}: {result[split]['documents']:,} documents, {result[split]['bytes']:,} bytes",
                    highlight=False,
                )
