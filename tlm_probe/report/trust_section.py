"""The report's "Trust" section of a `tlm trust` folder: which statistics to believe. It says first which are
flagged and why (the flags trust.csv holds, copied, never recomputed), then draws `tlm plot TRUST` and
gives trust.csv as a table, and the task target's clean accuracy and items where one was scored."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tlm_probe.errors import UserError
from tlm_probe.plotting.inputs import load_trust
from tlm_probe.plotting.trust import plot_trust
from tlm_probe.report.html import FigureBlock, Section, Table, Text

OK = "ok"
"""trust.csv's flags when nothing is flagged (trust/agreement.py)."""


def verdict(table: pd.DataFrame) -> str:
    """One sentence: the statistics that pass every check, and those flagged."""
    flags = table["flags"].fillna(OK).astype(str)
    passed = table.loc[flags == OK, "statistic"].astype(str).tolist()
    flagged = table.loc[flags != OK, "statistic"].astype(str).tolist()
    trusted = ", ".join(passed) if passed else "none"
    return (f"{len(flagged)} of {len(table)} statistics flagged"
            f"{': ' + ', '.join(flagged) if flagged else ''}; passing every check: {trusted}")


def _tokens(summary: dict) -> str:
    counts = summary.get("n_tokens") or {}
    return ", ".join(f"{c} {int(n):,} tokens" if n is not None else str(c) for c, n in counts.items()) or \
        ", ".join(map(str, summary["corpora"]))


def _task_text(summary: dict) -> Text | None:
    task = summary.get("task_target")
    if not task:
        return None
    tasks = "; ".join(f"{t['task']}: {t['n']} items, clean accuracy {t['acc_clean']:.3f}"
                      for t in task.get("tasks", []))
    return Text(f"task target {task['statistic']}: the {task.get('metric', 'acc')} lost when each layer is "
                f"ablated ({task.get('ablation')}); {tasks}")


def trust_section(path: Path, k: int, size, dpi) -> Section:
    """One trust folder: the verdict, the figure and trust.csv; `k` numbers its figure's file. A trust.json
    whose fields are not what tlm trust writes is one UserError naming it."""
    s, table = load_trust(path)
    try:
        return _section(path, k, size, dpi, s, table)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise UserError(f"{path / 'trust.json'} is not a tlm trust summary ({type(e).__name__}: "
                        f"{str(e)[:80]})") from None


def _section(path: Path, k: int, size, dpi, s: dict, table: pd.DataFrame) -> Section:
    model = str(s.get("model"))
    blocks = [
        Text(f"folder: {path}; {model} probed on {_tokens(s)}; ablation target {s.get('target')}; flagged "
             f"below W {s['min_w']:g} across corpora or Spearman ρ {s['min_spearman']:g}"),
        Text(verdict(table)),
        FigureBlock(f"trust-{k:02d}", f"tlm trust: each statistic's per-layer ranking against the corpora "
                    f"and the targets (✗: flagged), {model}",
                    lambda: plot_trust(table, thresholds=s, model=model, corpora=s["corpora"], size=size,
                                       dpi=dpi)),
        Table("trust.csv: Kendall's W across corpora, the lowest pairwise Spearman between corpora, the "
              "median Spearman with the ablation target and with the task target, and the flags", table),
    ]
    task = _task_text(s)
    if task is not None:
        blocks.append(task)
    return Section(f"Trust: {model}", blocks)
