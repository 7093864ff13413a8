"""Every CLI option is declared once, as a field of an options dataclass (issue 32): a command that writes a
typer.Option by hand fails here, and the CLI's defaults are the library's by construction."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import typer.main

from cli import app

ROOT = Path(__file__).resolve().parents[1]
GENERATORS = {"tlm_probe/commands/options.py"}
"""The generator itself (and the shared --config annotation) may call typer.Option."""
ALLOWED = {"tlm_probe/cli.py": 1}  # --version, on the app itself


def _option_calls(path: Path) -> int:
    tree = ast.parse(path.read_text())
    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.Call)
               and isinstance(node.func, ast.Attribute) and node.func.attr == "Option"
               and isinstance(node.func.value, ast.Name) and node.func.value.id == "typer")


def test_no_command_declares_an_option_by_hand():
    files = [ROOT / "cli.py", *sorted((ROOT / "tlm_probe").rglob("*.py"))]
    counts = {str(f.relative_to(ROOT)): _option_calls(f) for f in files}
    by_hand = {f: n for f, n in counts.items() if n and f not in GENERATORS and n > ALLOWED.get(f, 0)}
    assert not by_hand, f"options declared by hand (declare a dataclass field instead): {by_hand}"
    assert sum(counts.values()) <= 12  # issue 32: hand-declared options <= 12 (the generators' own calls)


def _params(name: str) -> dict:
    group = typer.main.get_group(app)
    return {p.name: p for p in group.commands[name].params}


def test_probe_options_are_the_library_defaults():
    from tlm_probe.commands.options import cli_fields
    from tlm_probe.probe.options import ProbeOptions

    params = _params("probe")
    for f in cli_fields(ProbeOptions):
        assert params[f.name].default == f.default, f.name
    hidden = {f.name for f in dataclasses.fields(ProbeOptions)} - {f.name for f in cli_fields(ProbeOptions)}
    assert hidden == {"guardrails", "length_bucketing", "importance"}  # library-only settings
    assert params["split"].default == "auto" and params["device"].default == "auto"


def _private(part: str) -> bool:
    """A private module name (_click), not a dunder one (__future__, lm_eval.__main__: public entries)."""
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def test_a_usage_error_is_one_line_without_private_imports():
    """No module of tlm_probe imports a private module of another library (typer._click and the like)."""
    bad = []
    for f in sorted((ROOT / "tlm_probe").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            bad += [f"{f.relative_to(ROOT)}: {n}" for n in names
                    if not n.startswith("tlm_probe") and any(_private(part) for part in n.split("."))]
    assert not bad, bad
