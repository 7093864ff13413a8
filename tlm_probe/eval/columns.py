"""Eval results as extra columns of a comparison (`tlm compare --eval-tasks`): each finished run is
evaluated once into RUN/eval/ (kept, so continuing a comparison does not evaluate again) and contributes
one column per task and metric, named "task:metric" (e.g. "pydoc-mc:acc", "pydoc-lastword:perplexity")."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from tlm_probe.eval.run import EvalOptions, resolved_device, run_eval

FOLDER = "eval"


def column_name(task: str, metric: str) -> str:
    return f"{task}:{metric}"


def eval_hook(opts: EvalOptions) -> Callable[[Path], dict]:
    """after_run for train.compare.compare: {column: value} of one run folder."""
    opts = resolved_device(opts)  # as run_eval records it in provenance.json

    def after_run(run: Path) -> dict:
        import pandas as pd

        from tlm_probe.results import write_results

        folder = run / FOLDER
        prov = folder / "provenance.json"
        same = prov.is_file() and json.loads(prov.read_text()).get("options") == _jsonable(opts)
        if same:
            table = pd.read_csv(folder / "results.csv")
        else:
            res = run_eval(str(run), opts)
            write_results(folder, res.table, None, res.provenance, kind="eval")
            table = res.table
        return {column_name(r.task, r.metric): float(r.value) for r in table.itertuples()}

    after_run.needs_tokenizer = bool(opts.tasks)  # task text must become ids: compare checks it first
    return after_run


def _jsonable(opts: EvalOptions) -> dict:
    return json.loads(json.dumps(asdict(opts), default=str))
