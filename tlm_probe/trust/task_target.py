"""The task-level target of `tlm trust`: how much accuracy a model loses on multiple-choice tasks when one
layer's MLP output is zeroed (or its whole block skipped), layer by layer.

The items are scored by tlm eval's own path (eval/run.run_eval on one preloaded Scorer: the same task
files, harness, prompts and metric `acc`), once clean and once per layer with the probe's ablation hook
(importance/ablation.ablating, the hook behind ablation_dnll_*) installed on that layer's module. The
target is the accuracy drop, clean minus ablated, over every scored item of every task (each item weighs
alike); per task, its paired standard error over items.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tlm_probe.errors import UserError

PARTS = {"mlp": "mlp_zero", "block": "block_skip"}
"""--target-ablation -> the ablation (importance/taps.ablation_plan names): zero the MLP output; the block
returns its input (attention and MLP both removed)."""
POOLED = "all"
TASK_COLUMNS = ["layer", "ablation", "task", "n", "acc_clean", "acc_ablated", "acc_drop", "acc_drop_stderr"]


@dataclass
class TaskTarget:
    name: str
    """The target's statistic name, e.g. task_acc_drop_mlp_zero."""
    drop: np.ndarray
    """(layers,) accuracy lost over all items when the layer is ablated."""
    table: pd.DataFrame
    """task_target.csv: TASK_COLUMNS, a row per layer x task and a pooled row per layer (task "all")."""
    summary: dict



def _correct(scorer, where: str, eval_opts) -> dict[str, np.ndarray]:
    """Per task: 1/0 per item (the harness's per-document acc), in document order."""
    from tlm_probe.eval.run import run_eval

    res = run_eval(where, eval_opts, scorer=scorer)
    out = {}
    for task, samples in res.samples.items():
        if not samples or "acc" not in samples[0]:
            raise UserError(f"--task {task} reports no per-item acc: the task target needs a task scored by "
                            "accuracy (multiple choice)")
        out[task] = np.array([s["acc"] for s in sorted(samples, key=lambda s: s["doc_id"])], dtype=float)
    return out


def _rows(layer: int, ablation: str, clean: dict, ablated: dict) -> list[dict]:
    pairs = [(t, clean[t], ablated[t]) for t in clean]
    pairs.append((POOLED, np.concatenate([c for _, c, _ in pairs]), np.concatenate([a for _, _, a in pairs])))
    rows = []
    for task, c, a in pairs:
        d = c - a
        se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
        rows.append({"layer": layer, "ablation": ablation, "task": task, "n": len(d), "acc_clean": c.mean(),
                     "acc_ablated": a.mean(), "acc_drop": d.mean(), "acc_drop_stderr": se})
    return rows


def task_target(pm, opts, eval_opts, progress: bool = False) -> TaskTarget:
    """Score the tasks clean, then with each layer's opts.target_ablation; nothing of the model is kept."""
    from tlm_probe.eval.scorer import Scorer, TextCodec

    codec = TextCodec(pm.tokenizer, "tlm trust", "to score its --task items (--task none: no task target)")
    scorer = Scorer(pm, codec, batch_size=opts.batch_size)
    where = str(pm.path) if pm.path else pm.name
    ablation = PARTS[opts.target_ablation]
    with tempfile.TemporaryDirectory(prefix="tlm-trust-tasks-") as tmp:
        eval_opts, written = _written_once(eval_opts, Path(tmp))
        clean = _correct(scorer, where, eval_opts)
        rows = _ablated_rows(pm, scorer, where, eval_opts, ablation, clean, progress)
    table = pd.DataFrame(rows, columns=TASK_COLUMNS)
    pooled = table[table["task"] == POOLED].sort_values("layer")
    summary = {"statistic": f"task_acc_drop_{ablation}", "ablation": ablation, "metric": "acc",
               "limit": opts.task_limit, "tasks": [{"task": t, "n": len(c), "acc_clean": float(c.mean())}
                                                   for t, c in clean.items()],
               "n_items": int(sum(len(c) for c in clean.values())), "built_in": written}
    return TaskTarget(summary["statistic"], pooled["acc_drop"].to_numpy(dtype=float), table, summary)


def _written_once(eval_opts, folder: Path):
    """The built-in tasks written once (their YAML in place of the name, so that each of the L + 1 evals
    reads the files instead of rebuilding them from the corpus); (options, what write_task records)."""
    from tlm_probe.eval.builtin_tasks import TASKS, write_task

    written = [write_task(t, folder, eval_opts.task_source, eval_opts.seed) for t in eval_opts.tasks
               if t in TASKS]
    tasks = tuple(str(folder / f"{t}.yaml") if t in TASKS else t for t in eval_opts.tasks)
    return dataclasses.replace(eval_opts, tasks=tasks), written


def _ablated_rows(pm, scorer, where: str, eval_opts, ablation: str, clean: dict, progress: bool) -> list:
    from tlm_probe.importance.ablation import ablating
    from tlm_probe.importance.taps import ablation_plan
    from tlm_probe.progress import Ticker

    rows = []
    with Ticker(f"trust: {', '.join(clean)} with each layer's {ablation}", pm.n_layers, "layers",
                enabled=progress) as bar:
        for ab in ablation_plan(pm, (ablation,)):
            # one ablation on rows [0, maxsize): every row of whatever batch the scorer sends; seq_len 1
            # views a token-flattened (B*T, d) output as (B*T, 1, d), which zeroing does not mind
            with ablating([ab], sys.maxsize, None, seq_len=1):
                rows += _rows(ab.layer, ablation, clean, _correct(scorer, where, eval_opts))
            bar.advance(1)
    return rows
