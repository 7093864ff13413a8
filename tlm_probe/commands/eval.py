"""`tlm eval MODEL --tasks T1,T2 [--ppl-data SOURCE ...] --out DIR`: lm-evaluation-harness tasks and
perplexity; tidy results.csv/.parquet + provenance.json (+ the built-in task configs under DIR/tasks/)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import typer
from rich.table import Table

from tlm_probe.commands.common import command, console, device_option, print_json, renamed
from tlm_probe.commands.flags import JsonOut, Loading, Threads
from tlm_probe.commands.options import HIDDEN, with_options
from tlm_probe.errors import UserError
from tlm_probe.eval.run import EvalOptions
from tlm_probe.progress import importing_libraries, since_start

EVAL_MARKERS = ("provenance.json", "results.csv", "results.parquet", "tasks")


@dataclass(frozen=True, kw_only=True)
class EvalRun(Loading, Threads, JsonOut):
    """`tlm eval`'s settings beside EvalOptions: where it writes, how the model is loaded, and the old names
    of two options (hidden from --help, still accepted)."""

    out: Path
    """Result folder: results.csv/.parquet, provenance.json, tasks/."""
    ppl_split: str | None = field(default=None, metadata={HIDDEN: True})
    """Old name of --split."""
    ppl_tokens: int | None = field(default=None, metadata={HIDDEN: True})
    """Old name of --max-tokens."""

    def options(self, given: EvalOptions) -> EvalOptions:
        """`given` with an old name's value moved to its new name (both, differing: one error line) and the
        device resolved."""
        default = EvalOptions()
        split = renamed(given.split, self.ppl_split, default.split, "--split", "--ppl-split")
        max_tokens = renamed(given.max_tokens, self.ppl_tokens, default.max_tokens, "--max-tokens",
                             "--ppl-tokens")
        return replace(given, split=split, max_tokens=max_tokens, device=device_option(given.device))


def register(app: typer.Typer) -> None:
    @command(
        app,
        "eval",
        "tlm eval demo/runs/uniform-s0 --tasks pydoc-mc,pydoc-lastword --ppl-data builtin:pydoc --out ev/u",
    )
    @with_options(options=EvalOptions, run=EvalRun)
    def eval_cmd(
        model: str = typer.Argument(
            ..., help="Checkpoint folder (ours or Hugging Face), a .gguf file or a hub name."
        ),
        *,
        options: EvalOptions,
        run: EvalRun,
    ):
        """Score a model on harness tasks (acc, acc_norm, perplexity) and held-out data (ppl, bits/byte)."""
        os.environ.setdefault("TQDM_DISABLE", "1")  # before lm_eval/datasets import tqdm: one status line
        from tlm_probe.capture.model_source import check_model_source
        from tlm_probe.commands.probe import import_loaders
        from tlm_probe.eval.run import check_options, load_scorer, run_eval, stays_offline
        from tlm_probe.files.folder_lock import folder_lock
        from tlm_probe.progress import where
        from tlm_probe.threads import torch_threads

        out = run.out
        check_model_source(model, device_map=options.device_map)
        check_options(options)  # before the device is resolved (that imports torch): check first
        check_output(out, [model, *options.ppl_data, *options.tasks])
        with importing_libraries():  # resolving the device imports torch: the first line says so
            opts = run.options(options)
        # a spinner on a terminal; in a log or a notebook (where rich draws nothing or wants ipywidgets)
        # plain lines per phase instead
        lines = not run.json_out and where() != "terminal"
        status = contextlib.nullcontext() if run.json_out or lines else console.status(f"evaluating {model}")
        # the lock from the first load to the last file: a second eval of this --out stops at once
        with folder_lock(out), torch_threads(run.threads), status, stays_offline(model, opts):
            import_loaders(model)  # the libraries first: a quick load stays quiet (progress.Phase)
            # a slow load says so on stderr (load_probe_model's progress.Phase)
            scorer = load_scorer(model, opts, run.unsafe_pickle, run.trust_remote_code)
            out.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.tasks-") as staging:
                res = run_eval(model, opts, scorer=scorer, task_dir=Path(staging), progress=lines)
                write_eval(out, res, Path(staging))
        if run.json_out:
            rows = res.table.to_dict("records")
            print_json({"out": str(out), "provenance": res.provenance, "results": rows})
        else:
            print_summary(res.table, res.provenance, out)


def check_output(out: Path, inputs=()) -> None:
    """Before any work: DIR may be new, empty or an earlier eval result; nothing else is replaced, and
    nothing the command reads (model, data, task files) is inside, around or at DIR."""
    from tlm_probe.files.fileio import check_kind, foreign
    from tlm_probe.files.out_folder import check_apart

    check_apart(out, inputs)
    check_kind(out, "eval")  # a probe's results.csv is not an earlier eval result
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not any((out / m).exists() for m in EVAL_MARKERS):
        raise UserError(f"--out {out} holds other files and is not a tlm eval result; choose another folder")
    clash = sorted(set(foreign(out)) & set(EVAL_MARKERS)) if out.is_dir() else []
    if clash:  # checked here, not when the results are published after the work (issue 49)
        raise UserError(f"refusing to replace {out / clash[0]}: tlm did not write it (move it away first, or "
                        "choose another --out)")
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
    for ppl in prov.get("perplexity", []):
        console.print(sample_line(ppl), soft_wrap=True)
    console.print(f"wrote {out}/results.csv, results.parquet, provenance.json in {since_start():.1f} s "
                  f"({prov['seconds']:.1f} s of it loading and evaluating)", soft_wrap=True)


def sample_line(ppl: dict) -> str:
    """What a perplexity number was measured on: which windows, how many of the split's, and the documents."""
    where = (f"{ppl['windows']:,} of {ppl['windows_split']:,} windows of {ppl['source']} ({ppl['split']})"
             f", {ppl['sample']}")
    docs = ("" if ppl.get("documents") is None else
            f"; {ppl['documents']:,} of its {ppl['documents_split']:,} documents")
    return f"perplexity on {where}{docs}"
