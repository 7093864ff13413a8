"""The documentation's commands (README.md, then the site's pages in nav order: tests/docs_blocks.py) run in
order as written: every path a `tlm` command in a run block reads was written (--out) by an earlier one, or
is one of the few placeholders named below; and the first blocks of the probe and plot how-to pages, run in
order on a real `tlm demo --quick` (each probe shortened with --max-tokens), succeed and write what the next
command reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from docs_blocks import run_blocks, words
from typer.testing import CliRunner

from cli import app

# paths the reader substitutes with their own (a model, a corpus): the page says so beside them
PLACEHOLDERS = {"path/to/hf-model", "corpus.jsonl:text", "A", "B", "DATA", "MODEL", "big-model"}
INPUTS = ("model", "model_a", "model_b", "checkpoint", "inputs", "data", "ppl_data", "source")


def _params(argv: list[str]) -> dict:
    """The command's parameters as the real CLI parses them (no callback runs)."""
    args = list(argv[1:])
    name = args.pop(0)
    cmd = typer.main.get_command(app).commands[name]
    if hasattr(cmd, "commands"):  # a group (tlm data prepare)
        cmd = cmd.commands[args.pop(0)]
    return cmd.make_context(name, args, resilient_parsing=True).params


def _inputs(params: dict) -> list[str]:
    values = []
    for key in INPUTS:
        value = params.get(key)
        values += [str(v) for v in (value if isinstance(value, list | tuple) else [value]) if v is not None]
    return [v for v in values if not v.startswith("builtin:")]


def _written_before(path: str, outs: list[str], shell_vars: set[str]) -> bool:
    if path.startswith("$"):
        return path[1:] in shell_vars
    return any(Path(path) == Path(o) or Path(o) in Path(path).parents for o in outs)


def test_every_path_a_docs_command_reads_is_written_by_an_earlier_one():
    outs: list[str] = []
    shell_vars: set[str] = set()
    missing = []
    for block in run_blocks():
        for line in block.lines():
            if re.match(r"^[A-Z_]+=", line):
                shell_vars.add(line.split("=", 1)[0])
            if not line.startswith("tlm "):
                continue
            params = _params(words(line))
            for path in _inputs(params):
                if path.rstrip("/") not in PLACEHOLDERS and not _written_before(path, outs, shell_vars):
                    missing.append(f"{block.page} ({block.section}): `{line}` reads {path}, which no "
                                   "earlier command of the docs writes")
            if params.get("out") is not None:
                outs.append(str(params["out"]))
    assert not missing, "\n".join(missing)


def _run_in_order(lines: list[str]) -> None:
    for line in lines:
        args = words(line)
        if args[1] == "probe":
            args += ["--max-tokens", "256", "--threads", "1"]  # seconds, not minutes
        r = CliRunner().invoke(app, args[1:])
        assert r.exit_code == 0, f"{line}\n{r.output}"


@pytest.mark.usefixtures("one_thread")
def test_the_probing_and_figures_examples_run_in_order(real_demo_dir, tmp_path, monkeypatch):
    from models_zoo import CORPUS, build_model

    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").symlink_to(real_demo_dir)  # what `tlm demo --out demo` wrote (here: --quick)
    build_model("gpt2", tmp_path / "path" / "to" / "hf-model")  # the placeholders, made real
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in CORPUS))
    for page in ("docs/how-to/probe.md", "docs/how-to/plot.md"):  # the first block of each
        block = next(b for b in run_blocks() if b.page == page and b.lang == "bash")
        _run_in_order([line for line in block.lines() if line.startswith("tlm ")])
    for made in ("probes/cosine/results.csv", "probes/uniform/results.csv", "probes/x/results.csv",
                 "align.png", "curves.pdf"):
        assert (tmp_path / made).is_file(), made
    assert any((tmp_path / "report").glob("*.html"))
