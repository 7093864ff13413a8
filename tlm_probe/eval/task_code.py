"""Task YAMLs are data a user may download, but lm-evaluation-harness imports and runs the Python that
their `!function module.name` tags name (and PyYAML's python/* tags would import modules). `tlm eval`
refuses such a file unless the user passes --trust-task-code, as --trust-remote-code guards a model's code.

Two checks: the files given to --tasks (and the files they `include:`) are read as plain YAML nodes before
any work, for a one-line refusal naming the file and the function; and while the harness runs, its
function importer refuses any module outside lm_eval's own task folder (a file that reaches the harness
another way, e.g. a sibling YAML of a group in the same folder).

Reading those files is itself bounded (issue 36), with or without --trust-task-code, since they are
received data: only regular files (not /dev/zero, a pipe or a folder), at most MAX_BYTES each (the size
checked before reading, and no more read), nesting at most MAX_DEPTH (checked while composing, before
PyYAML's recursion could overflow the stack), at most MAX_NODES nodes once every alias is expanded (an
alias bomb of 400 bytes is 387 million nodes; the harness and tlm's provenance expand them) and no alias
inside itself. An `include:` that is missing, not a mapping, or reached twice (a cycle: lm-eval refuses a
file it has already read) is one line naming it, as is a data file (dataset_kwargs.data_files of a local
json/csv/... dataset) that is not where the harness will look for it."""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import decode_utf8

PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in
              ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "binary", "merge", "omap",
               "pairs", "set", "value")}
HINT = "pass --trust-task-code to run it"
MAX_BYTES = 2**20
"""The largest task config read (lm-eval's own are a few kilobytes; documents belong in a data file)."""
MAX_DEPTH = 64
"""The deepest nesting of a task config (lm-eval's nest a few levels)."""
MAX_NODES = 100_000
"""The most YAML nodes of a task config with every alias expanded."""
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

        for node in _distinct_nodes(self.root):
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
    """`path` read and composed within the bounds; messages name it as `shown` (as the user gave it)."""
    import yaml

    text = _read_text(shown)
    loader = _loader_class()(text, shown)
    try:
        root = loader.get_single_node()
    except yaml.YAMLError as e:
        raise UserError(f"cannot read task config {shown}: {' '.join(str(e).split())[:300]}") from None
    except RecursionError:  # MAX_DEPTH keeps PyYAML well inside the stack; this is the last guard
        raise UserError(f"task config {shown} nests too deep to read: not a task config") from None
    finally:
        loader.dispose()
    _check_expansion(root, shown)
    return _Config(shown, root, _includes(root, shown))


def _read_text(path: Path) -> str:
    """The file's text, refused unless a regular file of at most MAX_BYTES (checked before reading, and no
    more than that read: a file that grows is cut at the limit) and UTF-8."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"task config {path} is not a regular file (a device, a pipe or a folder): "
                            "refusing to read it")
        if info.st_size > MAX_BYTES:
            raise UserError(f"task config {path} holds {info.st_size:,} bytes, more than the {MAX_BYTES:,} "
                            "a task config may (its documents belong in a data file: "
                            "dataset_kwargs.data_files)")
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise UserError(f"cannot read task config {path}: {e.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise UserError(f"task config {path} holds more than the {MAX_BYTES:,} bytes a task config may")
    return decode_utf8(raw, f"task config {path}")


@functools.cache
def _loader_class():
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        """SafeLoader's composer with a depth count: refused at MAX_DEPTH, before the recursion of
        compose_node could reach Python's limit (50,000 levels were a RecursionError traceback). The
        scanner and parser below it keep their state in lists, not in the stack."""

        def __init__(self, text: str, path: Path):
            super().__init__(text)
            self.depth, self.where = 0, path

        def compose_node(self, parent, index):
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    line = self.peek_event().start_mark.line + 1
                    raise UserError(f"task config {self.where} nests more than {MAX_DEPTH} levels deep (line "
                                    f"{line}): not a task config")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return BoundedLoader


def _children(node) -> list:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root, path: Path) -> None:
    """Refuse a document whose aliases expand to more than MAX_NODES nodes, or hold themselves: each
    distinct node's expanded size is counted once (the work is linear in the file, whatever its aliases)."""
    if root is None:
        return
    size: dict[int, int] = {}
    open_: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            if size[key] > MAX_NODES:
                raise UserError(f"task config {path} expands to more than {MAX_NODES:,} YAML nodes through "
                                "its aliases (an alias bomb): not a task config")
            continue
        if key in size:
            continue
        if key in open_:
            raise UserError(f"task config {path} holds an alias inside the node it names (a recursive "
                            "alias): not a task config")
        open_.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in open_:
                raise UserError(f"task config {path} holds an alias inside the node it names (a recursive "
                                "alias): not a task config")
            if id(child) not in size:
                stack.append((child, False))


def _distinct_nodes(root) -> Iterator:
    """Every node once (an aliased node is one node, however many times it is referred to)."""
    if root is None:
        return
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(_children(node))


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
        if not any(q.exists() for q in looked):
            where = " or ".join(str(q) for q in looked)
            raise UserError(f"task config {given}: its data file {name!r} (dataset_kwargs.data_files"
                            f"{f' {split}' if split else ''}) does not exist (looked for {where}); fix the "
                            "path in the config")


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
