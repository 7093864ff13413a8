"""Task names checked before any work: a name that is neither built in, nor a task YAML, nor known to
lm-evaluation-harness is refused with the nearest names, instead of a KeyError from the harness after the
model has loaded (or, in `tlm compare --eval-tasks`, after the first run has trained)."""

from __future__ import annotations

import difflib
import functools
import logging
from collections.abc import Iterable

from tlm_probe.errors import UserError
from tlm_probe.eval.builtin_tasks import BUILDERS


@functools.lru_cache(maxsize=1)
def harness_task_names() -> frozenset[str]:
    """Every task, group and tag name of the harness's own task folders. Building the index reads its
    ~15k YAML files (seconds); it is built only when a name is not ours, and once per process."""
    from lm_eval.tasks import TaskManager

    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    return frozenset(TaskManager(include_defaults=True).all_tasks)


def check_task_names(names: Iterable[str], declared: Iterable[str] = ()) -> None:
    """`names`: the task names given (not files); `declared`: names the given task YAMLs declare."""
    local = set(BUILDERS) | set(declared)
    unknown = [n for n in names if n not in local]
    if not unknown:
        return
    known = harness_task_names()
    for name in unknown:
        if name not in known:
            raise UserError(_unknown(name, sorted(local | known)))


def _unknown(name: str, pool: list[str]) -> str:
    near = difflib.get_close_matches(name, pool, n=5)
    ours = ", ".join(BUILDERS)
    if near:
        return f"unknown task {name!r}; did you mean {', '.join(near)}? (built in: {ours})"
    return f"unknown task {name!r}: not built in ({ours}), not a task YAML, not an lm-evaluation-harness task"
