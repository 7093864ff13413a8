"""Reading received YAML, bounded (issue 36): the one YAML reader of bytes from disk (`tlm train --config`,
`tlm eval --tasks` and the files those include).

Bounds: the size (at most YAML_MAX_BYTES, checked before reading, and no more read: files/bounded.py), UTF-8,
nesting at most MAX_DEPTH (counted while composing, before PyYAML's recursion could overflow the stack: a
file nested 50,000 deep was a RecursionError traceback), at most MAX_NODES nodes once every alias is
expanded (an alias bomb of 400 bytes is 387 million nodes, which the harness and tlm's provenance would
expand) and no alias inside the node it names. Only SafeLoader's tags are constructed. Every failure is one
UserError naming the file (as `label` gives it) and the limit."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.files.bounded import read_bounded
from tlm_probe.files.jsonfile import MAX_DEPTH, decode_utf8

YAML_MAX_BYTES = 2**20
"""The largest YAML file read (tlm's configs and lm-eval's task configs are a few kilobytes)."""
MAX_NODES = 100_000
"""The most YAML nodes of one document with every alias expanded."""


def compose_file(path: str | Path, label: str = "", what: str = "a YAML file tlm reads"):
    """The root node of the YAML document in `path` (None for an empty one), read and composed within the
    bounds; nothing is constructed, no tag resolved to Python. Messages name it as `label`."""
    label = label or str(path)
    loader = _loader(_read_text(path, label, what), label)
    try:
        return _compose(loader, label)
    finally:
        loader.dispose()


def load_file(path: str | Path, label: str = ""):
    """The Python value of the YAML document in `path` (SafeLoader's types only), within the bounds."""
    label = label or str(path)
    return loads(_read_text(path, label, "a YAML file tlm reads"), label)


def loads(text: str, label: str):
    """The Python value of the YAML document `text` (read from `label` within YAML_MAX_BYTES: load_file, or
    read_bounded), SafeLoader's types only, within the depth and alias bounds."""
    import yaml

    loader = _loader(text, label)
    try:
        root = _compose(loader, label)
        return None if root is None else loader.construct_document(root)
    except yaml.YAMLError as e:  # a tag or value SafeLoader cannot construct
        raise _invalid(label, e) from None
    finally:
        loader.dispose()


def _read_text(path: str | Path, label: str, what: str) -> str:
    return decode_utf8(read_bounded(path, YAML_MAX_BYTES, what, label), label)


def _invalid(label: str, e: Exception) -> UserError:
    return UserError(f"{label} is not valid YAML: {' '.join(str(e).split())[:300]}")


def _loader(text: str, label: str):
    """A BoundedLoader of `text`; PyYAML's reader checks the characters here already (a NUL byte is a
    ReaderError before the first token)."""
    import yaml

    try:
        return _loader_class()(text, label)
    except yaml.YAMLError as e:
        raise _invalid(label, e) from None


def _compose(loader, label: str):
    import yaml

    try:
        root = loader.get_single_node()
    except yaml.YAMLError as e:
        raise _invalid(label, e) from None
    except RecursionError:  # MAX_DEPTH keeps PyYAML well inside the stack; this is the last guard
        raise UserError(f"{label} nests too deep to read (the limit is {MAX_DEPTH} levels)") from None
    check_expansion(root, label)
    check_unique_keys(root, label)
    return root


def check_unique_keys(root, label: str) -> None:
    """Refuse a mapping that holds a key twice (YAML forbids it; PyYAML keeps the last silently, so a
    config with `lr:` twice trained with the second; issue 49). Merge keys (`<<`) may repeat."""
    import yaml

    for node in distinct_nodes(root):
        if not isinstance(node, yaml.MappingNode):
            continue
        seen: dict = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                continue
            if key.value in seen:
                raise UserError(f"{label} holds the key {key.value!r} twice (lines {seen[key.value]} and "
                                f"{key.start_mark.line + 1}); YAML keys must be unique: keep one")
            seen[key.value] = key.start_mark.line + 1


@functools.cache
def _loader_class():
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        """SafeLoader's composer with a depth count: refused at MAX_DEPTH, before the recursion of
        compose_node could reach Python's limit. The scanner and parser below it keep their state in
        lists, not in the stack."""

        def __init__(self, text: str, label: str):
            super().__init__(text)
            self.depth, self.where = 0, label

        def compose_node(self, parent, index):
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    self.too_deep(self.peek_event().start_mark.line + 1)
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def fetch_flow_collection_start(self, TokenClass):
            """The scanner runs up to 1,024 characters ahead of the composer, and its bookkeeping of
            possible keys costs the square of the flow depth there (a second per document of `[[[[`):
            refused as soon as the flow nesting alone passes MAX_DEPTH, which the composer would refuse."""
            if self.flow_level >= MAX_DEPTH:
                self.too_deep(self.line + 1)
            super().fetch_flow_collection_start(TokenClass)

        def too_deep(self, line: int):
            raise UserError(f"{self.where} nests more than {MAX_DEPTH} levels deep (line {line}): not a file "
                            "tlm reads")

    return BoundedLoader


def children(node) -> list:
    """The nodes directly inside `node` (keys and values of a mapping, items of a sequence)."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _recursive(label: str) -> UserError:
    return UserError(f"{label} holds an alias inside the node it names (a recursive alias): not a file tlm "
                     "reads")


def check_expansion(root, label: str) -> None:
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
            size[key] = 1 + sum(size[id(c)] for c in children(node))
            if size[key] > MAX_NODES:
                raise UserError(f"{label} expands to more than {MAX_NODES:,} YAML nodes through its aliases "
                                "(an alias bomb): not a file tlm reads")
            continue
        if key in size:
            continue
        if key in open_:
            raise _recursive(label)
        open_.add(key)
        stack.append((node, True))
        for child in children(node):
            if id(child) in open_:
                raise _recursive(label)
            if id(child) not in size:
                stack.append((child, False))


def distinct_nodes(root) -> Iterator:
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
        stack.extend(children(node))
