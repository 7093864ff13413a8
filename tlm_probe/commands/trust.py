"""`tlm trust MODEL --data A --data B --out DIR`: which importance statistics can be trusted for this model:
their per-layer ranking across corpora and against the ablation target (tlm_probe/trust/)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import typer

from tlm_probe.commands.common import command, console, print_json
from tlm_probe.commands.flags import JsonOut, Loading, Threads
from tlm_probe.commands.options import with_options
from tlm_probe.commands.overwrite import overwrite_help
from tlm_probe.commands.tables import print_fitted
from tlm_probe.progress import importing_libraries
from tlm_probe.trust.options import TrustOptions

_OURS = ("trust.csv", "values.csv", "halves.csv", "task_target.csv", "trust.json")


@dataclass(frozen=True, kw_only=True)
class TrustRun(Loading, Threads, JsonOut):
    out: Path
    """Result folder: trust.csv, values.csv, halves.csv, task_target.csv, trust.json."""
    overwrite: bool = field(default=False, metadata={"help": overwrite_help("trust")})
    """See commands/overwrite.py."""


def register(app: typer.Typer) -> None:
    @command(app, "trust", "tlm trust MODEL --data builtin:pydoc --data builtin:stdlib --out trust/m")
    @with_options(options=TrustOptions, run=TrustRun)
    def trust(
        model: str = typer.Argument(..., help="Checkpoint folder (ours or Hugging Face) or a hub name."),
        *,
        options: TrustOptions,
        run: TrustRun,
    ):
        """Can an importance statistic be trusted? Its ranking of layers across corpora and against ablation.

        Probe the model on several corpora; per statistic, Kendall's W of its per-layer ranking across them,
        the lowest pairwise Spearman, and its Spearman with the ablation target and with the accuracy lost on
        --task when each layer's MLP (or block) is ablated; flagged where the ranking changes with the corpus
        or disagrees."""
        from tlm_probe.capture.model_source import check_model_source
        from tlm_probe.files.out_folder import check_apart, claim
        from tlm_probe.trust.halves import check_halves
        from tlm_probe.trust.options import eval_options, wanted

        check_model_source(model)  # before any corpus is read or the model loaded
        if options.halves:  # a corpus of one sequence has no half b: from its shape, not after probing
            check_halves(model, options.data, options.seq_len, options.max_tokens)
        if wanted(options.task):
            eval_options(options)  # task names, files and data: before torch is imported
        check_apart(run.out, [model, *options.data])
        claim(run.out, overwrite=run.overwrite, writes=_OURS, own_needs_overwrite=False, kind="trust")
        with importing_libraries():  # torch: after the checks; the first line within a second says so
            from tlm_probe.files.folder_lock import folder_lock
            from tlm_probe.threads import torch_threads
            from tlm_probe.trust.engine import run_trust, write_trust
        with folder_lock(run.out), torch_threads(run.threads, "--threads"):
            res = run_trust(model, options, progress=not run.json_out,
                            trust_remote_code=run.trust_remote_code, unsafe_pickle=run.unsafe_pickle)
            write_trust(run.out, res)
        if run.json_out:
            print_json({"out": str(run.out), **res.summary})
            return
        print_summary(model, options, res)
        written = ", ".join(n for n in _OURS if (run.out / n).is_file())
        console.print(f"wrote {run.out}: {written}", highlight=False)


def print_summary(model: str, options: TrustOptions, res) -> None:
    """The rankings table, never cut to the console's width (80 columns in a log: split instead), and the
    task target's line."""
    print_fitted(console, *_table(model, options, res), left=("statistic", "verdict"))
    task = res.summary["task_target"]
    if task:
        items = ", ".join(f"{t['task']} {t['n']} items (acc {t['acc_clean']:.3f})" for t in task["tasks"])
        console.print(f"task target {task['statistic']}: accuracy lost per layer on {items}", highlight=False)


def _rho(x) -> str:
    return "-" if x is None or x != x else f"{x:+.2f}"


def _table(model: str, options: TrustOptions, res) -> tuple[str, tuple[str, ...], list[tuple[str, ...]]]:
    """The title, columns and rows of the rankings table."""
    title = f"{model}: rankings over {len(options.data)} corpora (target {options.target})"
    columns = ("statistic", "Kendall W", "min pairwise ρ", "ρ with target", "ρ with task", "verdict")
    rows = [(r.statistic, f"{r.kendall_w:.2f}", f"{r.min_pairwise_spearman:+.2f}",
             _rho(r.spearman_with_target), _rho(r.spearman_with_task), r.flags)
            for r in res.table.itertuples()]
    return title, columns, rows
