"""Text corpora as an iterator of documents, with a deterministic train/validation split.

A source string names where the text comes from (see SOURCE_HELP). The split assigns each document by a
BLAKE2b hash of its text, so it is the same on every run and machine and does not depend on the order in
which documents are read; identical documents always land on the same side.
"""

from __future__ import annotations

import ast
import functools
import glob
import hashlib
import sysconfig
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Literal, get_args

from tlm_probe.data.corpus_cache import cached_corpus
from tlm_probe.data.env_corpus import env_documents
from tlm_probe.data.tokens import is_prepared
from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import jsonl_records, read_json
from tlm_probe.registry import Registry

Split = Literal["auto", "train", "val", "test", "all"]
SPLIT_CHOICES: tuple[str, ...] = get_args(Split)
SPLITS = SPLIT_CHOICES[1:]
SPLIT_HELP = (
    "The documents read from a source with a hash split (token files have none). auto reads val where a "
    "model may have trained on the source (the built-in corpora, a prepared "
    "folder, the source a tlm run records in its data.json) and all of any other source, so that "
    "training text is never mixed in unasked."
)
VAL_PERCENT = 5
"""Share of documents (by hash) held out for validation."""
TEST_PERCENT = {"builtin:env": 5}
"""Share of documents (by hash, after validation's) held out as a test split, by source. Sources not named
here have no test split, so their train/val split is what it always was."""
TEXT_SUFFIXES = (".txt", ".md", ".rst", ".py", ".text")
SOURCE_HELP = (
    "builtin:pydoc (Python docs + stdlib docstrings, no download) | builtin:stdlib (stdlib source) | "
    "builtin:env (source + docs of the installed packages; train/val/test) | "
    "a text file, folder or glob | file.jsonl[:field] | hf:NAME[:split[:config]] | "
    "a datasets.save_to_disk folder"
)
# stdlib folders that are tests, vendored copies or data rather than library code
_STDLIB_SKIP = {
    "test",
    "tests",
    "idlelib",
    "site-packages",
    "dist-packages",
    "lib2to3",
    "turtledemo",
    "__pycache__",
    "ensurepip",
    "config-3",
}


def split_of(text: str, test_percent: int = 0) -> str:
    """'val', 'test' or 'train' for one document, from a hash of its UTF-8 text (stable across machines):
    hash bands [0, VAL_PERCENT) are val, [VAL_PERCENT, VAL_PERCENT + test_percent) test, the rest train."""
    h = int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")
    band = h % 100
    if band < VAL_PERCENT:
        return "val"
    return "test" if band < VAL_PERCENT + test_percent else "train"


def resolve_split(split: str, source, model=None) -> str:
    """The split `auto` stands for (see SPLIT_HELP); any other split is returned as given."""
    if split != "auto":
        return split
    if not isinstance(source, str | Path):  # an in-memory array or list of texts: no split to take
        return "all"
    text = str(source)
    if text.startswith("builtin:") or is_prepared(text) or text in _trained_on(model):
        return "val"
    return "all"


def _trained_on(model) -> set[str]:
    """The data source(s) a tlm run folder records in data.json (empty for any other model)."""
    if not isinstance(model, str | Path) or not (Path(model) / "data.json").is_file():
        return set()
    try:
        recorded = read_json(Path(model) / "data.json").get("source")
    except (UserError, AttributeError):
        return set()
    return {str(recorded), str(Path(str(recorded)).resolve())} if isinstance(recorded, str) else set()


def has_test_split(source: str) -> bool:
    return source in TEST_PERCENT


def iter_documents(source: str = "builtin:pydoc", split: str = "all") -> Iterator[str]:
    """Non-empty documents of `source` in a fixed order, restricted to `split` (train | val | all).

    Raises UserError when the source does not exist or yields no document in the requested split.
    """
    if split not in SPLITS:
        raise UserError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    n, test_percent = 0, TEST_PERCENT.get(source, 0)
    for doc in _raw_documents(source):
        if doc.strip() and (split == "all" or split_of(doc, test_percent) == split):
            n += 1
            yield doc
    if n == 0:
        raise UserError(f"data source {source!r} has no documents in split {split!r}")


def _raw_documents(source: str) -> Iterable[str]:
    for prefix, reader in _PREFIXES.items():
        if source.startswith(prefix):
            return reader(source[len(prefix) :])
    return _path_documents(source)


# ---- embedded corpora -------------------------------------------------------------------------------


def _stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _stdlib_files(top_level_only: bool) -> list[Path]:
    root = _stdlib_root()
    pattern = "*.py" if top_level_only else "**/*.py"
    files = [p for p in root.glob(pattern) if not _STDLIB_SKIP.intersection(p.relative_to(root).parts[:-1])]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def _docstrings(path: Path) -> Iterator[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:  # a few stdlib files target other Python versions
        return
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for node in ast.walk(tree):
        doc = ast.get_docstring(node) if isinstance(node, kinds) else None
        if doc:
            yield doc


@functools.lru_cache(maxsize=1)
def _pydoc_corpus() -> tuple[str, ...]:
    # pydoc topics (the language reference) first, then the docstrings of the top-level stdlib modules,
    # read with ast so that nothing is imported (importing e.g. `antigravity` has side effects);
    # cached because parsing ~170 files costs about a second and the corpus never changes in a process
    from pydoc_data.topics import topics

    docs = [topics[key] for key in sorted(topics)]
    for path in _stdlib_files(top_level_only=True):
        docs.extend(_docstrings(path))
    return tuple(docs)


def _pydoc(rest: str) -> Iterator[str]:
    return iter(_pydoc_corpus())


def _stdlib(rest: str) -> Iterator[str]:
    for path in _stdlib_files(top_level_only=False):
        yield path.read_text(encoding="utf-8", errors="replace")


BUILTIN = Registry("builtin corpus", {"pydoc": _pydoc, "stdlib": _stdlib, "env": env_documents})


def _builtin(name: str) -> Iterable[str]:
    reader = BUILTIN.get(name)
    if name == "env":  # tens of megabytes, read file by file: streamed, not cached
        return env_documents()
    return iter(cached_corpus(name, functools.partial(reader, "")))  # on disk across runs


# ---- files ------------------------------------------------------------------------------------------


def _paragraphs(text: str) -> Iterator[str]:
    # a text file is split at blank lines so that even a single file gets a validation split
    block: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.strip():
            block.append(line)
        elif block:
            yield "".join(block)
            block = []
    if block:
        yield "".join(block)


def _text_file(path: Path) -> Iterator[str]:
    yield from _paragraphs(path.read_text(encoding="utf-8", errors="replace"))


def _jsonl(path: Path, field: str) -> Iterator[str]:
    for where, rec in jsonl_records(path):  # bounded: line length, nesting, UTF-8 (issue 36)
        if not isinstance(rec, dict) or field not in rec:
            raise UserError(f"{where} has no field {field!r}")
        if isinstance(rec[field], str):
            yield rec[field]


def _split_jsonl(source: str) -> tuple[Path, str] | None:
    head, sep, field = source.rpartition(":")
    if sep and head.endswith(".jsonl"):
        return Path(head), field
    if source.endswith(".jsonl"):
        return Path(source), "text"
    return None


def _is_hf_disk(path: Path) -> bool:
    return (
        (path / "dataset_info.json").is_file()
        or (path / "dataset_dict.json").is_file()
        or (path / "state.json").is_file()
    )


def _path_documents(source: str) -> Iterator[str]:
    jsonl = _split_jsonl(source)
    if jsonl is not None:
        if not jsonl[0].is_file():
            raise UserError(f"data file not found: {jsonl[0]}")
        yield from _jsonl(*jsonl)
        return
    path = Path(source)
    if path.is_dir() and _is_hf_disk(path):
        yield from _hf_disk(path)
        return
    files = _expand_files(source)
    for f in files:
        reader = _jsonl_default if f.suffix == ".jsonl" else _text_file
        yield from reader(f)


def _jsonl_default(path: Path) -> Iterator[str]:
    return _jsonl(path, "text")


def _expand_files(source: str) -> list[Path]:
    path = Path(source)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = [p for p in path.rglob("*") if p.is_file() and p.suffix in (*TEXT_SUFFIXES, ".jsonl")]
    else:
        files = [Path(p) for p in glob.glob(source, recursive=True) if Path(p).is_file()]
    if not files:
        raise UserError(f"data source {source!r} matches no text file")
    return sorted(files)


# ---- Hugging Face datasets --------------------------------------------------------------------------


def _text_column(ds, where: str) -> str:
    names = list(ds.column_names)
    if "text" in names:
        return "text"
    if "content" in names:
        return "content"
    raise UserError(f"dataset {where} has no 'text' or 'content' column (columns: {', '.join(names)})")


def _rows(ds, where: str) -> Iterator[str]:
    col = _text_column(ds, where)
    for row in ds:
        if isinstance(row[col], str):
            yield row[col]


def _hf_disk(path: Path) -> Iterator[str]:
    import datasets

    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):  # every split in a fixed order; our own split is by hash
        for name in sorted(ds):
            yield from _rows(ds[name], f"{path}[{name}]")
    else:
        yield from _rows(ds, str(path))


def _hf_hub(rest: str) -> Iterator[str]:
    import datasets

    name, _, tail = rest.partition(":")
    hf_split, _, config = tail.partition(":")  # hf:NAME[:split[:config]], e.g. a sample of a large corpus
    try:
        ds = datasets.load_dataset(name, config or None, split=hf_split or "train")
    except Exception as e:  # offline, unknown name, bad split: all user-facing
        raise UserError(f"cannot load Hugging Face dataset {name!r}: {str(e).splitlines()[0]}") from None
    yield from _rows(ds, name)


_PREFIXES: dict[str, Callable[[str], Iterable[str]]] = {"builtin:": _builtin, "hf:": _hf_hub}
