"""Task YAMLs are data a user may download, but lm-evaluation-harness imports and runs the Python that
their `!function module.name` tags name (and PyYAML's python/* tags would import modules). `tlm eval`
refuses such a file unless the user passes --trust-task-code, as --trust-remote-code guards a model's code.

Two checks: the files given to --tasks (and the files they `include:`) are read as plain YAML nodes before
any work, for a one-line refusal naming the file and the function; and while the harness runs, its
function importer refuses any module outside lm_eval's own task folder (a file that reaches the harness
another way, e.g. a sibling YAML of a group in the same folder)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from tlm_probe.errors import UserError

PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in
              ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "binary", "merge", "omap",
               "pairs", "set", "value")}
HINT = "pass --trust-task-code to run it"


def check_task_code(tasks: list[str], trust: bool) -> None:
    """Refuse (one UserError line) a task file that would run Python code, unless `trust`."""
    if trust:
        return
    seen: set[Path] = set()
    for task_file in _task_files(tasks):
        for path, tag, value in _code_tags(task_file, seen):
            raise UserError(f"task config {path} runs Python code ({tag} {value}); {HINT}")


def _task_files(tasks: list[str]) -> Iterator[Path]:
    for t in tasks:
        p = Path(t)
        if p.is_dir():
            yield from sorted(f for f in p.rglob("*") if f.suffix in (".yaml", ".yml") and f.is_file())
        elif p.is_file() and p.suffix in (".yaml", ".yml"):
            yield p


def _code_tags(path: Path, seen: set[Path]) -> Iterator[tuple[Path, str, str]]:
    """(file, tag, value) of every node that is not plain data, in `path` and the files it includes."""
    import yaml

    path = path.resolve()
    if path in seen:
        return
    seen.add(path)
    try:  # compose: nodes with their tags, nothing constructed, nothing imported
        root = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return  # unreadable: reading the task names refuses it with its own line
    for node in _walk(root):
        if node.tag not in PLAIN_TAGS:
            yield path, node.tag, node.value if isinstance(node, yaml.ScalarNode) else "..."
    for inc in _includes(root):
        yield from _code_tags(inc if inc.is_absolute() else path.parent / inc, seen)


def _walk(node) -> Iterator:
    import yaml

    if node is None:
        return
    yield node
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield from _walk(key)
            yield from _walk(value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _walk(item)


def _includes(root) -> list[Path]:
    import yaml

    if not isinstance(root, yaml.MappingNode):
        return []
    found = []
    for key, value in root.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "include":
            items = value.value if isinstance(value, yaml.SequenceNode) else [value]
            found += [Path(i.value) for i in items if isinstance(i, yaml.ScalarNode)]
    return found


@contextlib.contextmanager
def harness_code_guard(trust: bool):
    """While the harness runs: its `!function` importer refuses modules outside lm_eval's own tasks.
    lm_eval 0.4.13 resolves the tag in tasks/_yaml_loader.py (older 0.4 releases in utils.import_function,
    which has no such hook here: there the check before any work is the guard)."""
    import lm_eval.tasks

    loader = sys.modules.get("lm_eval.tasks._yaml_loader")
    original = getattr(loader, "_import_func_in_yml", None)
    if trust or original is None:
        yield
        return
    own = Path(lm_eval.tasks.__file__).resolve().parent

    def guarded(qual: str, base_dir: Path):
        if not Path(base_dir).resolve().is_relative_to(own):
            raise UserError(f"a task config in {base_dir} runs Python code (!function {qual}); {HINT}")
        return original(qual, base_dir)

    loader._import_func_in_yml = guarded
    try:
        yield
    finally:
        loader._import_func_in_yml = original
