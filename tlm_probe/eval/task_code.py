"""Task YAMLs are data a user may download, but lm-evaluation-harness imports and runs the Python that
their `!function module.name` tags name (and PyYAML's python/* tags would import modules). `tlm eval`
refuses such a file unless the user passes --trust-task-code, as --trust-remote-code guards a model's code.

Two checks: the files given to --tasks (and the files they `include:`) are read as plain YAML nodes before
any work, for a one-line refusal naming the file and the function; and while the harness runs, its
function importer refuses any module outside lm_eval's own task folder (a file that reaches the harness
another way, e.g. a sibling YAML of a group in the same folder).

Reading those files is itself bounded (issue 36), with or without --trust-task-code, since they are
received data: they are read by the one bounded YAML reader, tlm_probe/files/yamlfile.py (regular files
only, size, nesting depth, alias expansion). An `include:` that is missing, not a mapping, or reached twice
(a cycle: lm-eval refuses a file it has already read) is one line naming it, as is a data file
(dataset_kwargs.data_files of a local json/csv/... dataset) that is not where the harness will look for it."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.files.yamlfile import compose_file, distinct_nodes

PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in
              ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "binary", "merge", "omap",
               "pairs", "set", "value")}
HINT = "pass --trust-task-code to run it"
TOO_BIG = "a task config (its documents belong in a data file: dataset_kwargs.data_files)"
MAX_INCLUDES = 100
"""The most files one task config may reach through `include:`."""
LOCAL_BUILDERS = frozenset({"json", "csv", "text", "parquet", "arrow", "pandas", "xml"})
"""datasets' packaged builders whose data_files are local paths (relative ones: to the working directory)."""


def check_task_code(tasks: list[str], trust: bool) -> None:
    """Before any work: every task file given (and what it includes) reads within the bounds, its includes
    and data files exist, and (unless `trust`) none would run Python code. Each fault is one UserError."""
    cache: dict[Path, _Config] = {}
    for task_file in _task_files(tasks):
        files = _read_with_includes(task_file, cache)
        if not trust:
            for config in files.values():
                for tag, value in config.code_tags():
                    raise UserError(f"task config {config.path} runs Python code ({tag} {value}); {HINT}")
        _check_data_files(task_file, files)


def _task_files(tasks: list[str]) -> Iterator[Path]:
    for t in tasks:
        p = Path(t)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.suffix in (".yaml", ".yml"))
            for f in found:  # the harness opens every one of them: a pipe or a device would never end
                if not f.is_dir() and not f.is_file():
                    raise UserError(f"task folder {p} holds {f}, which is not a regular file (a device, a "
                                    "pipe or a broken link); move it out of the folder")
            yield from (f for f in found if f.is_file())
        elif p.is_file() and p.suffix in (".yaml", ".yml"):
            yield p


@dataclass
class _Config:
    """One task file read as YAML nodes (nothing constructed, nothing imported)."""

    path: Path
    root: object
    includes: list[Path] = field(default_factory=list)

    def code_tags(self) -> Iterator[tuple[str, str]]:
        import yaml

        for node in distinct_nodes(self.root):
            if node.tag not in PLAIN_TAGS:
                yield node.tag, node.value if isinstance(node, yaml.ScalarNode) else "..."

    def top(self, key: str):
        """The value node of a top-level `key`, or None."""
        import yaml

        if isinstance(self.root, yaml.MappingNode):
            for k, v in self.root.value:
                if isinstance(k, yaml.ScalarNode) and k.value == key:
                    return v
        return None


def _read_with_includes(given: Path, cache: dict[Path, _Config]) -> dict[Path, _Config]:
    """The given task file and every file it reaches through `include:` (resolved path -> config), each
    read once (lm-eval reads each once per task and refuses one reached again: a cycle, or the same file
    through two includes). `cache`: the files already read for other given files."""
    configs: dict[Path, _Config] = {}

    def visit(path: Path, chain: list[Path]) -> None:
        if path in chain:
            cycle = " -> ".join(str(p) for p in [*chain[chain.index(path):], path])
            raise UserError(f"task config {given}: include cycle {cycle}; lm-evaluation-harness cannot "
                            "load it")
        if path in configs:
            raise UserError(f"task config {given} reaches {path} twice (again through {chain[-1]}); "
                            "lm-evaluation-harness reads each file once per task: include it once")
        if len(configs) >= MAX_INCLUDES:
            raise UserError(f"task config {given} reaches more than {MAX_INCLUDES} files through include:")
        if path not in cache:
            cache[path] = _read_config(path, given if not chain else path)
        config = configs[path] = cache[path]
        if chain and not _is_mapping(config.root):
            raise UserError(f"task config {chain[-1]} includes {path}, which is not a YAML mapping of task "
                            "settings")
        for inc in config.includes:
            target, includer = _target(path, inc), given if not chain else path
            if not target.exists():
                raise UserError(f"task config {includer} includes {inc}, which does not exist (looked for "
                                f"{target})")
            if not target.is_file():  # /dev/zero would be read forever, a pipe waited on
                raise UserError(f"task config {includer} includes {inc}, which is not a regular file (a "
                                "device, a pipe or a folder): refusing to read it")
            visit(target, [*chain, path])

    visit(given.expanduser().resolve(), [])
    return configs


def _target(path: Path, inc: Path) -> Path:
    """Where lm-eval looks for an include of the file `path`: as given when absolute, else beside it."""
    return (inc if inc.is_absolute() else path.parent / inc).resolve()


def _is_mapping(node) -> bool:
    import yaml

    return isinstance(node, yaml.MappingNode)


def _read_config(path: Path, shown: Path) -> _Config:
    """`path` read and composed within the bounds (files/yamlfile.py); messages name it as `shown` (as the
    user gave it)."""
    root = compose_file(path, f"task config {shown}", TOO_BIG)
    return _Config(shown, root, _includes(root, shown))


def _includes(root, path: Path) -> list[Path]:
    import yaml

    if not isinstance(root, yaml.MappingNode):
        return []
    found = []
    for key, value in root.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "include":
            items = value.value if isinstance(value, yaml.SequenceNode) else [value]
            for i in items:
                if not isinstance(i, yaml.ScalarNode) or not i.value.strip():
                    raise UserError(f"task config {path}: `include:` must name a file or a list of files "
                                    f"(line {i.start_mark.line + 1})")
                found.append(Path(i.value).expanduser())
    return found


# ---- data files --------------------------------------------------------------------------------------
def _check_data_files(given: Path, configs: dict[Path, _Config]) -> None:
    """A local data file of the task (after includes are merged: the given file's own keys win, then the
    last include's) must be where the harness will look: from the working directory, or (a given config
    without include:, which tlm rewrites; eval/task_paths.py) beside the config. Only a config that
    declares a task is checked (a template's paths are its includer's business)."""
    import yaml

    key = given.expanduser().resolve()
    builder = _effective(key, configs, "dataset_path")
    kwargs = _effective(key, configs, "dataset_kwargs")
    if _effective(key, configs, "task") is None or builder is None or kwargs is None:
        return
    if not isinstance(builder, yaml.ScalarNode) or builder.value not in LOCAL_BUILDERS:
        return
    beside_ok = not configs[key].includes
    for split, node in data_file_nodes(kwargs):
        name = node.value
        if not name or "://" in name or any(c in name for c in "*?[") or name.startswith("hf:"):
            continue  # a URL or a pattern: the harness's own business
        p = Path(name).expanduser()
        looked = [p] if p.is_absolute() else [Path.cwd() / p, *([key.parent / p] if beside_ok else [])]
        found = [q for q in looked if q.exists()]
        if not found:
            where = " or ".join(str(q) for q in looked)
            raise UserError(f"task config {given}: its data file {name!r} (dataset_kwargs.data_files"
                            f"{f' {split}' if split else ''}) does not exist (looked for {where}); fix the "
                            "path in the config")
        task = _effective(key, configs, "task")
        _check_documents(given, getattr(task, "value", "?"), found[0], builder.value)


def _check_documents(given: Path, name: str, data: Path, builder: str) -> None:
    """A local data file the harness would fail on with a traceback of its own (issue 49: StopIteration on
    an empty file, DatasetGenerationError on a malformed line) is one line naming the task config and the
    file. A json file is read as JSON Lines through the bounded reader (or, failing that, as one JSON
    document, which datasets also reads); other formats are checked for holding something."""
    if not data.is_file():
        return
    task = f"task {name!r} ({given}): its data file {data}"
    if data.stat().st_size == 0:
        raise UserError(f"{task} is empty (no documents to evaluate)")
    if builder != "json":
        return
    from tlm_probe.files.jsonfile import jsonl_records, read_json

    try:
        records = [r for _, r in jsonl_records(data)]
    except UserError as lines_error:
        try:
            read_json(data)
            return
        except UserError:
            raise UserError(f"{task} is not JSON Lines: {lines_error}") from None
    if not records:
        raise UserError(f"{task} holds no documents (only blank lines)")
    bad = next((i for i, r in enumerate(records, 1) if not isinstance(r, dict)), None)
    if bad is not None:
        raise UserError(f"{task}: document {bad} is a JSON {type(records[bad - 1]).__name__}, not an object")


def _effective(path: Path, configs: dict[Path, _Config], key: str):
    """The value node of a top-level `key` as lm-eval merges includes (shallowly): the file's own, else
    the last include that has it, recursively (the include graph is acyclic: _read_with_includes)."""
    config = configs[path]
    own = config.top(key)
    if own is not None:
        return own
    found = None
    for inc in config.includes:
        found = _effective(_target(path, inc), configs, key) or found
    return found


def data_file_nodes(kwargs) -> list[tuple[str, object]]:
    """(split, scalar node) of every file named under dataset_kwargs.data_files (a name, a list, or a
    mapping of split -> name or list); `kwargs`: the dataset_kwargs node."""
    import yaml

    if not isinstance(kwargs, yaml.MappingNode):
        return []
    files = None
    for k, v in kwargs.value:
        if isinstance(k, yaml.ScalarNode) and k.value == "data_files":
            files = v
    if files is None:
        return []
    pairs = [(k.value if isinstance(k, yaml.ScalarNode) else "", v) for k, v in files.value] \
        if isinstance(files, yaml.MappingNode) else [("", files)]
    out = []
    for split, node in pairs:
        items = node.value if isinstance(node, yaml.SequenceNode) else [node]
        out += [(split, i) for i in items if isinstance(i, yaml.ScalarNode)]
    return out


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
