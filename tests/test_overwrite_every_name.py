"""--overwrite writes beside a user's files and never onto one, for EVERY name a command leaves in its folder.

Each command runs once into a fresh folder; what it left there is the list of names it writes (learned, not
declared, so a name the command's declaration misses is caught). Then, for each name, a folder holding only
a user's file (or folder) by that name: the same command with --overwrite (where it has one) must refuse in
one `error:` line naming it, before any work, and leave the folder as it was. `tlm sweep` once replaced a
user's sweep.csv after training: its figures were not among the names its check refused."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from tiny_flags import TINY
from typer.testing import CliRunner

from cli import app
from tlm_probe.files.ownership import MANIFEST

runner = CliRunner()
OUT = "OUT"
DATA = ["--data", "ids.npy"]
COMMANDS = {
    "train": ["train", *DATA, *TINY],
    "probe": ["probe", "tr", *DATA, "--max-tokens", "64"],
    "report": ["report", "pr"],
    "diff": ["diff", "tr", "tr2", *DATA],
    "trust": ["trust", "tr", *DATA, "--data", "ids2.npy", "--task", "none"],
    "export": ["export", "tr", "--hf-llama"],
    "data prepare": ["data", "prepare", "text.txt"],
    "compare": ["compare", *DATA, "--schedules", "uniform,cosine:1.5:0.5", "--seeds", "0,1", *TINY],
    "sweep": ["sweep", *DATA, "--shapes", "cosine", "--ratios", "1.25:0.75,1.5:0.5", "--seeds", "0,1", *TINY],
    "demo": ["demo", "--quick", "--steps", "2", "--seeds", "0,1", "--threads", "1"],
    "eval": ["eval", "tr", "--ppl-data", "ids.npy", "--max-tokens", "64"],
}
NO_OVERWRITE_FLAG = {"eval"}
"""Commands that replace their own files without --overwrite (and have no such flag)."""


def _ok(argv: list[str]) -> None:
    r = runner.invoke(app, argv)
    assert r.exit_code == 0, (argv, r.output, r.exception)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("overwrite")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        np.save("ids.npy", np.arange(4096) % 64)
        np.save("ids2.npy", (np.arange(4096) * 7) % 64)
        Path("text.txt").write_text("\n\n".join(f"paragraph {i} of a tiny corpus" for i in range(2000)))
        _ok(["train", *DATA, "--out", "tr", *TINY])
        _ok(["train", *DATA, "--out", "tr2", "--seed", "1", *TINY])
        _ok(["probe", "tr", *DATA, "--max-tokens", "64", "--out", "pr"])
    return root


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def _users(folder: Path, name: str, was_folder: bool) -> None:
    folder.mkdir()
    if was_folder:
        (folder / name).mkdir()
        (folder / name / "mine.txt").write_text("the user's\n")
    else:
        (folder / name).write_text("the user's\n")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_overwrite_never_replaces_a_users_file_of_any_name_the_command_writes(work, command, monkeypatch):
    monkeypatch.chdir(work)
    argv = COMMANDS[command]
    first = Path(f"first-{command.replace(' ', '-')}")
    _ok([*argv, "--out", str(first)])
    names = {p.name: p.is_dir() for p in first.iterdir() if p.name != MANIFEST}
    assert len(names) >= 2, names
    for i, (name, was_folder) in enumerate(sorted(names.items())):
        folder = Path(f"user-{command.replace(' ', '-')}-{i}")
        _users(folder, name, was_folder)
        before = snapshot(work)
        flag = [] if command in NO_OVERWRITE_FLAG else ["--overwrite"]
        r = runner.invoke(app, [*argv, "--out", str(folder), *flag])
        lines = r.output.strip().splitlines()
        assert r.exit_code == 1 and "Traceback" not in r.output, (command, name, r.output)
        assert len(lines) == 1 and lines[0].startswith("error: ") and name in lines[0], r.output
        assert snapshot(work) == before, (command, name)
