"""Every `tlm` subcommand as a user starts it: in a fresh interpreter, where nothing is imported yet, so an
import-order bug or an import circle fails here instead of reaching a user (issue 36: `tlm data prepare
builtin:pydoc` with the default byte tokenizer died of a circular import that in-process tests, whose
modules were already imported, could not see); and each README `tlm` command that runs in seconds offline,
in README order (the others, and why: README_NOT_RUN)."""

from __future__ import annotations

import json
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


# ---- each README `tlm` command, in a fresh process, in README order (issue 36 item 6) -------------------
README_NOT_RUN = {
    "tlm demo": "trains four models for hundreds of steps and probes them (minutes on CPU); its `demo/` "
                "here is the session's `tlm demo --quick` (conftest real_demo_dir); its --help runs above",
    "tlm sweep": "18 training runs even at --steps 2 --seeds 0 (~30 s on 2 cores); its runs are compare's "
                 "code, run below, and `tlm sweep --help` runs above",
    "--eval-tasks": "compare + lm-eval per run (~20 s shortened): compare and eval each run below",
    "big-model/": "device-map dispatch of a model larger than one device (the second needs two GPUs)",
    "$GGUF": "a GGUF file downloaded from the Hub: no network in CI",
}
"""README commands not run here, and why (each matched by a word of the command line)."""
SHORTER = {
    "train": ["--steps", "2", "--eval-tokens", "256", "--threads", "1"],
    "compare": ["--seeds", "0", "--steps", "2", "--eval-tokens", "256", "--threads", "1"],
    "probe": ["--max-tokens", "256", "--threads", "1"],
    "diff": ["--max-tokens", "256", "--threads", "1"],
    "trust": ["--max-tokens", "256", "--task-limit", "4", "--threads", "1"],
    "eval": ["--limit", "4", "--max-tokens", "512", "--threads", "1"],
}
"""Flags appended to a README command (the last value of a flag wins) so that it runs in seconds: the same
code path, fewer steps, seeds, tokens or items."""
PLACEHOLDER_FOR = {"A": "demo/runs/cosine:1.5:0.5-s0", "B": "demo/runs/uniform-s0", "DATA": "builtin:pydoc",
                   "MODEL": "demo/runs/uniform-s0"}


def _readme_commands() -> list[list[str]]:
    from test_readme_examples import _blocks, _words

    lines = [line for _, block in _blocks() for line in block if line.startswith("tlm ")]
    return [_words(line) for line in lines
            if not any(key in line for key in README_NOT_RUN)]


def test_readme_commands_not_run_are_named():
    from test_readme_examples import _blocks

    lines = [line for _, block in _blocks() for line in block if line.startswith("tlm ")]
    skipped = [line for line in lines if any(key in line for key in README_NOT_RUN)]
    assert len(_readme_commands()) + len(skipped) == len(lines) and len(_readme_commands()) >= 12


@pytest.mark.usefixtures("one_thread")
def test_every_quick_readme_command_runs_in_a_fresh_process(real_demo_dir, tmp_path):
    """The README's commands as a user types them, each in a new interpreter, in README order in one folder
    (what one writes the next reads), shortened by SHORTER. Not run (README_NOT_RUN says why): `tlm demo`
    (minutes), `tlm sweep` and the `--eval-tasks` compare (tens of seconds; their code runs in compare and
    eval here), the two `big-model/` device-map examples (a model larger than a device, two GPUs) and the
    two `$GGUF` ones (a download)."""
    from models_zoo import CORPUS, build_model

    (tmp_path / "demo").symlink_to(real_demo_dir)
    build_model("gpt2", tmp_path / "path" / "to" / "hf-model")  # the README's placeholders, made real
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in CORPUS))
    for words in _readme_commands():
        args = [PLACEHOLDER_FOR.get(w, w) for w in words[1:]] + SHORTER.get(words[1], [])
        res = _tlm(*args, cwd=tmp_path)
        assert res.returncode == 0 and "Traceback" not in res.stderr, (args, res.stderr[-2000:])
        if "--out" in args:  # it wrote what it was asked to
            assert (tmp_path / args[args.index("--out") + 1]).exists(), args
