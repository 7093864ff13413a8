"""Every `tlm` subcommand as a user starts it: in a fresh interpreter, where nothing is imported yet, so an
import-order bug or an import circle fails here instead of reaching a user (issue 36: `tlm data prepare
builtin:pydoc` with the default byte tokenizer died of a circular import that in-process tests, whose
modules were already imported, could not see); and each command and Python example of the documentation
(README.md and the site's pages, tests/docs_blocks.py) in documentation order, each in a fresh process: the
`tlm` lines of the run blocks (the few that take minutes, and why: DOCS_NOT_RUN) and the Python blocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from cli import app

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[list[str]]:
    group = typer.main.get_group(app)
    out = []
    for name, cmd in sorted(group.commands.items()):
        subs = getattr(cmd, "commands", None)
        out += [[name, sub] for sub in sorted(subs)] if subs else [[name]]
    return out


def _tlm(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tlm_probe", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.parametrize("command", _commands(), ids=" ".join)
def test_every_subcommand_starts_in_a_fresh_process(command):
    res = _tlm(*command, "--help")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "Usage:" in res.stdout


def test_data_prepare_with_the_default_byte_tokenizer_in_a_fresh_process(tmp_path):
    res = _tlm("data", "prepare", "builtin:pydoc", "--out", str(tmp_path / "prep"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert (tmp_path / "prep" / "meta.json").is_file()


def test_a_bad_input_in_a_fresh_process_is_one_error_line(tmp_path):
    (tmp_path / "bad.json").write_text("{")
    res = _tlm("info", str(tmp_path / "bad.json"))
    assert res.returncode == 1
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr


# ---- each documented `tlm` command and Python block, in a fresh process, in docs order (issues 36, 47) -----
DOCS_NOT_RUN = {
    "tlm demo": "trains four models for hundreds of steps and probes them (minutes on CPU); its `demo/` "
                "here is the session's `tlm demo --quick` (conftest real_demo_dir); its --help runs above",
    "tlm sweep": "18 training runs even at --steps 2 --seeds 0 (~30 s on 2 cores); its runs are compare's "
                 "code, run below, and `tlm sweep --help` runs above",
    "--eval-tasks": "compare + lm-eval per run (~20 s shortened): compare and eval each run below",
}
"""Lines of run blocks not run here, and why (each matched by a word of the command line); whole blocks
that cannot run offline say why in the page itself (`<!-- not run: REASON -->`)."""
SHORTER = {
    "train": ["--steps", "2", "--eval-tokens", "256", "--threads", "1"],
    "compare": ["--seeds", "0", "--steps", "2", "--eval-tokens", "256", "--threads", "1"],
    "probe": ["--max-tokens", "256", "--threads", "1"],
    "diff": ["--max-tokens", "256", "--threads", "1"],
    "trust": ["--max-tokens", "256", "--task-limit", "4", "--threads", "1"],
    "eval": ["--limit", "4", "--max-tokens", "512", "--threads", "1"],
}
"""Flags appended to a documented command (the last value of a flag wins) so that it runs in seconds: the
same code path, fewer steps, seeds, tokens or items."""
PLACEHOLDER_FOR = {"A": "demo/runs/cosine:1.5:0.5-s0", "B": "demo/runs/uniform-s0", "DATA": "builtin:pydoc",
                   "MODEL": "demo/runs/uniform-s0"}


def _steps() -> list[tuple[str, list[str] | str]]:
    """("tlm", argv) for each command run, ("python", code) for each Python block, in documentation order."""
    from docs_blocks import run_blocks, words

    out: list[tuple[str, list[str] | str]] = []
    for block in run_blocks():
        if block.lang == "python":
            out.append(("python", block.code))
            continue
        out += [("tlm", words(line)) for line in block.lines()
                if line.startswith("tlm ") and not any(key in line for key in DOCS_NOT_RUN)]
    return out


def test_docs_commands_not_run_are_named():
    from docs_blocks import run_blocks

    lines = [ln for b in run_blocks() if b.lang == "bash" for ln in b.lines() if ln.strip()]
    other = [ln for ln in lines if not ln.startswith(("tlm ", "#"))]
    assert not other, f"a run block holds a line that is not a tlm command (mark the block not run): {other}"
    skipped = [ln for ln in lines if any(key in ln for key in DOCS_NOT_RUN)]
    ran = [s for s in _steps() if s[0] == "tlm"]
    assert len(ran) + len(skipped) == len(lines) and len(ran) >= 20


@pytest.mark.usefixtures("one_thread")
def test_every_docs_command_and_python_block_runs_in_a_fresh_process(real_demo_dir, tmp_path):
    """The documentation's commands as a user types them and its Python blocks as a user pastes them, each
    in a new interpreter, in documentation order in one folder (what one writes the next reads), commands
    shortened by SHORTER. Not run: DOCS_NOT_RUN's lines and the blocks a page marks `not run`."""
    from models_zoo import CORPUS, build_model

    (tmp_path / "demo").symlink_to(real_demo_dir)
    build_model("gpt2", tmp_path / "path" / "to" / "hf-model")  # the docs' placeholders, made real
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in CORPUS))
    for kind, step in _steps():
        if kind == "python":
            res = subprocess.run([sys.executable, "-c", step], capture_output=True, text=True, cwd=tmp_path,
                                 timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
            assert res.returncode == 0, (step, res.stderr[-2000:])
            continue
        args = [PLACEHOLDER_FOR.get(w, w) for w in step[1:]] + SHORTER.get(step[1], [])
        res = _tlm(*args, cwd=tmp_path)
        assert res.returncode == 0 and "Traceback" not in res.stderr, (args, res.stderr[-2000:])
        if "--out" in args:  # it wrote what it was asked to
            out = tmp_path / args[args.index("--out") + 1]
            assert out.exists(), args
            _named_on_the_files_page(out)


def _named_on_the_files_page(out: Path) -> None:
    """Every file a command wrote at the top of its --out folder is named on docs/reference/files.md."""
    if not out.is_dir():
        return
    page = (ROOT / "docs" / "reference" / "files.md").read_text()
    missing = [p.name for p in out.iterdir() if p.is_file() and f"`{p.name}`" not in page]
    assert not missing, f"{out.name}: {missing} not on docs/reference/files.md"
