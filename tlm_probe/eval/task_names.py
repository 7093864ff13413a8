"""Task names checked before any work: a name that is neither built in, nor a task YAML, nor known to
lm-evaluation-harness is refused with the nearest names, instead of a KeyError from the harness after the
model has loaded (or, in `tlm compare --eval-tasks`, after the first run has trained)."""

from __future__ import annotations

import difflib
import functools
import logging
import re
from collections.abc import Iterable

from tlm_probe.errors import UserError
from tlm_probe.eval.builtin_tasks import TASKS


@functools.lru_cache(maxsize=1)
def harness_task_names() -> frozenset[str]:
    """Every task, group and tag name of the harness's own task folders. Building the index reads its
    ~15k YAML files (seconds); it is built only when a name is not ours, and once per process."""
    from lm_eval.tasks import TaskManager

    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    return frozenset(TaskManager(include_defaults=True).all_tasks)


def check_task_names(names: Iterable[str], declared: Iterable[str] = ()) -> None:
    """`names`: the task names given (not files); `declared`: names the given task YAMLs declare."""
    local = set(TASKS) | set(declared)
    unknown = [n for n in names if n not in local]
    if not unknown:
        return
    declared_names = absent_from_harness(unknown)
    if declared_names is not None:  # no harness file mentions it: refused without building the index
        raise UserError(_unknown(unknown[0], sorted(local | declared_names)))
    known = harness_task_names()
    for name in unknown:
        if name not in known:
            raise UserError(_unknown(name, sorted(local | known)))


_DECLARED = re.compile(rb"^\s*-?\s*(?:task|group|tag):\s*[\"']?([\w.\-]+)", re.MULTILINE)


def absent_from_harness(names: list[str]) -> frozenset[str] | None:
    """When the first of `names` appears in none of the harness's task YAMLs (every task, group and tag
    name the index is built from is written in one), the names those files declare (for suggestions);
    else None (it may be a harness task: build the index). A text scan without importing lm_eval: ~0.4 s
    of CPU against the index's ~13 s (a 47 s wait on a loaded machine; issue 49)."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.origin:
        return None
    root = os.path.join(os.path.dirname(spec.origin), "tasks")
    paths = [os.path.join(d, f) for d, _, files in os.walk(root) for f in files
             if f.endswith((".yaml", ".yml"))]
    text = b"\n".join(_read(p) for p in paths)  # one search of ~7 MB: faster than 14k
    if names[0].encode() in text:
        return None
    declared = {m.decode(errors="replace") for m in _DECLARED.findall(text)}
    return frozenset(declared)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _unknown(name: str, pool: list[str]) -> str:
    near = difflib.get_close_matches(name, pool, n=5)
    ours = ", ".join(TASKS)
    if near:
        return f"unknown task {name!r}; did you mean {', '.join(near)}? (built in: {ours})"
    return f"unknown task {name!r}: not built in ({ours}), not a task YAML, not an lm-evaluation-harness task"
