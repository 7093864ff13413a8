"""`tlm eval MODEL --tasks T1,T2 [--ppl-data SOURCE ...] --out DIR`: lm-evaluation-harness tasks and
perplexity; tidy results.csv/.parquet + provenance.json (+ the built-in task configs under DIR/tasks/)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

import typer
from rich.table import Table

from tlm_probe.commands.common import DEVICE_HELP, command, console, device_option, print_json, renamed
from tlm_probe.errors import UserError

EVAL_MARKERS = ("provenance.json", "results.csv", "results.parquet", "tasks")


def register(app: typer.Typer) -> None:
    @command(
        app,
        "eval",
        "tlm eval demo/runs/uniform-s0 --tasks pydoc-mc,pydoc-lastword --ppl-data builtin:pydoc --out ev/u",
    )
    def eval_cmd(
        model: str = typer.Argument(
            ..., help="Checkpoint folder (ours or Hugging Face), a .gguf file or a hub name."
        ),
        out: Path = typer.Option(
            ..., "--out", "-o", help="Result folder: results.csv/.parquet, provenance.json, tasks/."
        ),
        tasks: str = typer.Option(
            "", help="Comma-separated: pydoc-mc, pydoc-lastword (built in, offline), a task YAML, or any "
            "lm-evaluation-harness task name (its dataset must be available)."
        ),
        ppl_data: list[str] = typer.Option(
            [], "--ppl-data", help="Perplexity on this source (repeatable; any source `tlm train` reads)."
        ),
        split: str = typer.Option("val", help="Split of each --ppl-data source: val | train | all."),
        ppl_context: int = typer.Option(0, help="Perplexity window length (0: the model's context)."),
        ppl_stride: int = typer.Option(0, help="Stride between perplexity windows (0: = context, disjoint)."),
        max_tokens: int = typer.Option(65_536, help="Scored tokens per --ppl-data source (0: all)."),
        ppl_split: str = typer.Option(None, "--ppl-split", hidden=True, help="Old name of --split."),
        ppl_tokens: int = typer.Option(None, "--ppl-tokens", hidden=True, help="Old name of --max-tokens."),
        limit: int = typer.Option(None, help="Documents per task.", show_default="all"),
        task_source: str = typer.Option("builtin:pydoc", help="Corpus the built-in tasks are made from."),
        batch_size: int = typer.Option(8, help="Sequences per forward pass."),
        device: str = typer.Option("auto", help=DEVICE_HELP),
        dtype: str = typer.Option("float32", help="float32 | float64 | bfloat16 | float16"),
        seed: int = typer.Option(0, help="Seed of the built-in tasks' draws and of the harness."),
        threads: int = typer.Option(0, help="CPU threads for PyTorch (0: PyTorch's default)."),
        trust_remote_code: bool = typer.Option(False, "--trust-remote-code", help="Run a hub model's code."),
        unsafe_pickle: bool = typer.Option(False, "--unsafe-pickle", help="Allow pickle (.bin/.pt) weights."),
        trust_task_code: bool = typer.Option(
            False, "--trust-task-code", help="Let task YAMLs run the Python their !function tags name."
        ),
        json_out: bool = typer.Option(False, "--json", help="Print the result rows as JSON."),
    ):
        """Score a model on harness tasks (acc, acc_norm, perplexity) and held-out data (ppl, bits/byte)."""
        os.environ.setdefault("TQDM_DISABLE", "1")  # before lm_eval/datasets import tqdm: one status line
        from tlm_probe.commands.probe import _threads
        from tlm_probe.eval.run import EvalOptions, check_options, load_scorer, run_eval, stays_offline
        from tlm_probe.files.folder_lock import folder_lock
        from tlm_probe.progress import where

        split = renamed(split, ppl_split, "val", "--split", "--ppl-split")
        max_tokens = renamed(max_tokens, ppl_tokens, 65_536, "--max-tokens", "--ppl-tokens")
        opts = EvalOptions(
            tasks=[t.strip() for t in tasks.split(",") if t.strip()], ppl_data=list(ppl_data),
            ppl_split=split, ppl_context=ppl_context, ppl_stride=ppl_stride, ppl_tokens=max_tokens,
            limit=limit, task_source=task_source, batch_size=batch_size, device=device_option(device),
            dtype=dtype, seed=seed, trust_task_code=trust_task_code,
        )
        check_options(opts)
        check_output(out, [model, *opts.ppl_data, *opts.tasks])
        if threads < 0:
            raise UserError(f"--threads must be >= 0, got {threads}")
        # a spinner on a terminal; in a log or a notebook (where rich draws nothing or wants ipywidgets)
        # plain lines per phase instead
        lines = not json_out and where() != "terminal"
        status = contextlib.nullcontext() if json_out or lines else console.status(f"evaluating {model}")
        # the lock from the first load to the last file: a second eval of this --out stops at once
        with folder_lock(out), _threads(threads), status, stays_offline(model, opts):
            scorer = load_scorer(model, opts, unsafe_pickle, trust_remote_code)
            out.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.tasks-") as staging:
                res = run_eval(model, opts, scorer=scorer, task_dir=Path(staging), progress=lines)
                write_eval(out, res, Path(staging))
        if json_out:
            rows = res.table.to_dict("records")
            print_json({"out": str(out), "provenance": res.provenance, "results": rows})
        else:
            print_summary(res.table, res.provenance, out)


def check_output(out: Path, inputs=()) -> None:
    """Before any work: DIR may be new, empty or an earlier eval result; nothing else is replaced, and
    nothing the command reads (model, data, task files) is inside, around or at DIR."""
    from tlm_probe.files.fileio import check_apart, check_kind

    check_apart(out, inputs)
    check_kind(out, "eval")  # a probe's results.csv is not an earlier eval result
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not any((out / m).exists() for m in EVAL_MARKERS):
        raise UserError(f"--out {out} holds other files and is not a tlm eval result; choose another folder")
    parent = next((p for p in [out, *out.parents] if p.exists()), Path("."))
    if not os.access(parent, os.W_OK):
        raise UserError(f"--out {out} cannot be written ({parent} is not writable)")


RELATIVE_NOTE = ("# data_files below is relative to this file's folder (so the eval folder can be moved);\n"
                 "# tlm eval --tasks THIS_FILE finds it here; lm_eval looks in its working directory.\n")


def write_eval(out: Path, res, staging: Path) -> None:
    """results + provenance (all-or-nothing, results.write_results), then the built-in task files (named in
    the folder's manifest first, each written atomically)."""
    from tlm_probe.files.fileio import atomic_write_text, record
    from tlm_probe.results import write_results

    write_results(out, res.table, None, res.provenance, kind="eval")
    written = [p for p in staging.iterdir() if p.suffix in (".yaml", ".jsonl")]
    if not written:
        return
    tasks = out / "tasks"
    record(out, ["tasks"], "eval")
    tasks.mkdir(exist_ok=True)
    for p in written:
        text = p.read_text()
        if p.suffix == ".yaml":  # the data file by its name, next to the config: the folder can move
            text = text.replace(json.dumps(str(staging / f"{p.stem}.jsonl")), json.dumps(f"{p.stem}.jsonl"))
            text = RELATIVE_NOTE + text
        atomic_write_text(tasks / p.name, text)


def print_summary(table, prov: dict, out: Path) -> None:
    tokenizer = Path(prov["tokenizer"]).name  # a tokenizer read from a folder or a .gguf file: its name
    t = Table(title=f"{prov['model']} ({prov['architecture']['family']}, tokenizer {tokenizer})")
    for c in ("task", "metric", "value", "stderr", "n"):
        t.add_column(c, justify="right" if c in ("value", "stderr", "n") else "left")
    for _, r in table.iterrows():
        stderr = "" if r["stderr"] is None or r["stderr"] != r["stderr"] else f"{r['stderr']:.4g}"
        t.add_row(r["task"], r["metric"], f"{r['value']:.4g}", stderr, f"{int(r['n']):,}")
    console.print(t)
    console.print(f"wrote {out}/results.csv, results.parquet, provenance.json ({prov['seconds']:.1f} s)")

