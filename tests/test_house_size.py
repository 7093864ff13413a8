"""Small by rule (issue 45): the house's size caps and "one concept, one home" as tests, read from the source
with `ast` (nothing is imported, so this runs in well under a second).

- every file of tlm_probe/ (and the top-level cli.py) has at most MAX_FILE_LINES lines;
- every function or method has at most MAX_FUNCTION_LINES lines, counted from its `def` line to its last
  line (end_lineno - lineno + 1: decorators excluded, docstring and nested functions included);
- a public module-level name (a function, a class, or an assigned name not starting with `_`) is defined in
  one module of tlm_probe/ only: where two modules meant the same thing, one defines it and the other imports
  it; where they meant different things, each name says which (WEIGHTS_FILE, not WEIGHTS). Names that are a
  protocol, meaning the same thing in every module that defines one, are allowed where the protocol lives.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tlm_probe"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 50

PROTOCOLS = {
    "register": "tlm_probe/commands/",  # each command module's register(app): cli.py calls them all alike
    "print_summary": "tlm_probe/commands/",  # each command module's console summary of its own result
    "main": ("tlm_probe/cli.py", "tlm_probe/lm_eval.py"),  # a console script's entry point (pyproject.toml)
}
"""name -> where it may be defined more than once (a folder prefix, or the modules), and why."""

def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py")) + [ROOT / "cli.py"]


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@functools.cache
def _trees() -> dict[str, ast.Module]:
    return {_name(p): ast.parse(p.read_text(), filename=str(p)) for p in _sources()}


def _is_overload(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(ast.unparse(d) in ("overload", "typing.overload") for d in node.decorator_list)


def _public_definitions(tree: ast.Module) -> list[str]:
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_overload(node):
            continue  # a typing.overload signature: the function's definition follows it
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_")]


def _allowed(name: str, module: str) -> bool:
    where = PROTOCOLS.get(name)
    if where is None:
        return False
    return module.startswith(where) if isinstance(where, str) else module in where


def test_no_file_over_the_cap():
    over = {_name(p): n for p in _sources() if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES}
    assert not over, f"files over {MAX_FILE_LINES} lines (split them along a seam, one concept each): {over}"


def test_no_function_over_the_cap():
    over = {}
    for module, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    over[f"{module}:{node.lineno} {node.name}"] = length
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines: {over}"


def test_each_public_name_has_one_home():
    homes = defaultdict(list)
    for module, tree in _trees().items():
        if module == "cli.py":  # the console script's shim, not a module of the package
            continue
        for name in _public_definitions(tree):
            if not _allowed(name, module):
                homes[name].append(module)
    repeated = {n: m for n, m in homes.items() if len(m) > 1}
    assert not repeated, ("public names defined in more than one module (import the one home, rename where "
                          f"the meanings differ, or make a module's own detail private): {repeated}")


def test_the_checks_see_a_violation():
    """The readers above catch what they are for (else every test here would pass on nothing)."""
    tree = ast.parse("X = 1\n_y = 2\nclass C: ...\n@d\ndef f():\n" + "    pass\n" * 60)
    assert _public_definitions(tree) == ["X", "C", "f"]
    f = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    assert f.end_lineno - f.lineno + 1 == 61  # the decorator's line is not counted
    assert _allowed("register", "tlm_probe/commands/train.py")
    assert not _allowed("register", "tlm_probe/models/hf.py")
