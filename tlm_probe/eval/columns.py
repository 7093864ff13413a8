"""Eval results as extra columns of a comparison (`tlm compare --eval-tasks`): each finished run is
evaluated once into RUN/eval/ (kept, so continuing a comparison does not evaluate again) and contributes
one column per task and metric, named "task:metric" (e.g. "pydoc-mc:acc", "pydoc-lastword:perplexity")."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.eval.run import EvalOptions, resolved_device, run_eval
from tlm_probe.files.jsonfile import read_json_object
from tlm_probe.files.tablefile import read_table_file

FOLDER = "eval"


def column_name(task: str, metric: str) -> str:
    return f"{task}:{metric}"


def eval_hook(opts: EvalOptions) -> Callable[[Path], dict]:
    """after_run for train.compare.compare_arms: {column: value} of one run folder."""
    opts = resolved_device(opts)  # as run_eval records it in provenance.json

    def after_run(run: Path) -> dict:
        from tlm_probe.results import write_results

        folder = run / FOLDER
        prov = folder / "provenance.json"
        same = prov.is_file() and read_json_object(prov).get("options") == _jsonable(opts)  # bounded readers
        if same:
            table = _cached_table(folder / "results.csv")
        else:
            res = run_eval(str(run), opts)
            write_results(folder, res.table, None, res.provenance, kind="eval")
            table = res.table
        return {column_name(r.task, r.metric): float(r.value) for r in table.itertuples()}

    after_run.needs_tokenizer = bool(opts.tasks)  # task text must become ids: compare checks it first
    return after_run


def _cached_table(path: Path):
    """A run's kept eval table, read back bounded; one without the columns (or numbers) used is refused."""
    import pandas as pd

    table = read_table_file(path)
    missing = [c for c in ("task", "metric", "value") if c not in table.columns]
    if missing:
        raise UserError(f"{path} is not a tlm eval table: no column {missing[0]!r}")
    if pd.to_numeric(table["value"], errors="coerce").isna().ne(table["value"].isna()).any():
        raise UserError(f"{path}: column 'value' holds a non-number")
    return table


def _jsonable(opts: EvalOptions) -> dict:
    return json.loads(json.dumps(asdict(opts), default=str))
