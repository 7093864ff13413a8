"""Issue 36, hostile and hand-made input met through the CLI: exactly one `error:` line and exit 1 (the
study script: one line and a non-zero exit), quickly and within bounded memory, and nothing written.

1. `tlm eval --tasks FILE.yaml`: the task-YAML guard itself must not be the denial of service (an alias
   bomb, an `include:` of /dev/zero, nesting 50,000 deep, a missing or cyclic include, a missing data file).
2. `tlm compare`: two arms that are one allocation spelled two ways are refused before training.
3. `tlm compare`: every refusal comes before the first file is written (the --out folder unchanged, byte
   for byte), and a full disk while it sets up leaves the folder as it was.
4. Messages that state the facts: a full disk names the path, what was needed or written, and what to do.
5. `python -m analyses.study collect`: a hand-made compare.json, or no runs at all, is one line, not a
   KeyError traceback or a silent exit 0.
The hostile task files run `tlm` in a child process under a memory cap (RLIMIT_AS) and a time limit."""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import resource
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_eval_security import ck  # noqa: F401 (the module's tiny model, a fixture)
from tiny_flags import TINY
from typer.testing import CliRunner

from cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
MEMORY_CAP = 4 * 2**30
"""Address space of a child `tlm`: enough for torch and the harness, not for reading /dev/zero to the end."""
HANG_S = 120
"""A child still running after this long is a hang (a refusal takes seconds, most of them imports)."""


def snapshot(root: Path) -> dict[str, str]:
    """Every path under root -> the sha256 of its bytes ('dir' for a folder)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def _one_line(output: str, needles: tuple[str, ...]) -> str:
    lines = output.strip().splitlines()
    assert "Traceback" not in output, output
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _refused(argv: list[str], *needles: str) -> str:
    """In this process, through typer: exit 1 and one `error:` line holding every needle."""
    r = runner.invoke(app, argv)
    assert r.exit_code == 1, (r.exit_code, r.output, r.exception)
    return _one_line(r.output, needles)


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _refused_in_child(argv: list[str], cwd: Path, *needles: str) -> tuple[str, float]:
    """`python cli.py ARGV` in a child under MEMORY_CAP and HANG_S: exit 1 and one `error:` line."""
    started = time.monotonic()
    try:
        p = subprocess.run([sys.executable, str(ROOT / "cli.py"), *argv], cwd=cwd, capture_output=True,
                           text=True, timeout=HANG_S, preexec_fn=_cap_memory)
    except subprocess.TimeoutExpired:
        pytest.fail(f"tlm {' '.join(argv)} still ran after {HANG_S} s")
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr[-3000:])
    return _one_line(p.stdout + p.stderr, needles), time.monotonic() - started


# ---- 1. the task-YAML guard of `tlm eval` -------------------------------------------------------------
def _task(folder: Path, name: str, data: str, extra: str = "") -> Path:
    """A valid multiple-choice task whose test split is the JSONL `data` (as written in the YAML)."""
    folder.mkdir(parents=True, exist_ok=True)
    yaml = folder / f"{name}.yaml"
    yaml.write_text(extra + textwrap.dedent(f"""\
        task: {name}
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {data}
        output_type: multiple_choice
        test_split: test
        doc_to_text: "{{{{context}}}}"
        doc_to_choice: "{{{{choices}}}}"
        doc_to_target: label
        metric_list:
          - metric: acc
    """))
    return yaml


def _docs(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f'{{"context": "x = {i}", "choices": ["a", "b"], "label": {i % 2}}}\n'
                            for i in range(4)))
    return path


def _alias_bomb(path: Path) -> Path:
    """~400 bytes: nine levels of nine aliases each, 9**9 (387 million) leaves once expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    path.write_text("\n".join(lines) + "\ntask: lol\n")
    return path


HOSTILE = {
    "alias bomb": (lambda d: _alias_bomb(d / "lol.yaml"), ("lol.yaml", "alias")),
    "recursive alias": (lambda d: _write(d / "loop.yaml", "task: loop\nx: &a [1, *a]\n"),
                        ("loop.yaml", "alias")),
    "include /dev/zero": (lambda d: _write(d / "zero.yaml", "include: /dev/zero\ntask: zero\n"),
                          ("zero.yaml", "/dev/zero", "not a regular file")),
    "nested 50,000 deep": (lambda d: _write(d / "deep.yaml", "task: deep\nx: " + "[" * 50_000 + "]" * 50_000),
                           ("deep.yaml", "nests", "64")),
    "block nesting": (lambda d: _write(d / "block.yaml", "task: b\n" + "".join(
        f"{' ' * i}k{i}:\n" for i in range(1200)) + " " * 1200 + "end\n"), ("block.yaml", "nests")),
    "huge": (lambda d: _write(d / "huge.yaml", "task: huge\nx: " + "y" * (2 * 2**20) + "\n"),
             ("huge.yaml", "bytes")),
}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("trust", [False, True], ids=["plain", "trusted"])
@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_task_files_are_one_line_quickly(ck, tmp_path, case, trust):  # noqa: F811
    """Before: the alias bomb hung (the guard walked each alias once per reference), /dev/zero was read
    to the end of memory (MemoryError traceback) and deep nesting was a RecursionError traceback."""
    if trust and case not in ("alias bomb", "include /dev/zero", "nested 50,000 deep"):
        pytest.skip("--trust-task-code skips only the code check: three cases show the bounds still hold")
    make, needles = HOSTILE[case]
    yaml = make(tmp_path)
    out = tmp_path / "ev"
    argv = ["eval", str(ck), "--tasks", str(yaml), "--limit", "2", "--out", str(out),
            *(["--trust-task-code"] if trust else [])]
    _line, took = _refused_in_child(argv, tmp_path, *needles)
    assert not out.exists()
    assert took < HANG_S / 2


def test_a_fifo_among_the_task_files_is_refused_not_waited_on(ck, tmp_path):  # noqa: F811
    import os

    folder = tmp_path / "tasks"
    _task(folder, "ok", str(_docs(tmp_path / "d.jsonl")))
    os.mkfifo(folder / "pipe.yaml")  # opening it would wait for a writer forever
    _refused_in_child(["eval", str(ck), "--tasks", str(folder), "--out", str(tmp_path / "ev")], tmp_path,
                      "pipe.yaml", "not a regular file")


@pytest.mark.parametrize("how", ["missing", "cycle", "self", "list", "not a mapping"])
def test_a_bad_include_is_one_line_naming_it(ck, tmp_path, how):  # noqa: F811
    """Before: lm-eval's KeyError traceback ("Spec 'x' is not a registered task/group/tag name")."""
    folder = tmp_path / "tasks"
    include = {"missing": "nothere.yaml", "cycle": "other.yaml", "self": "child.yaml",
               "list": "[base.yaml, nothere.yaml]", "not a mapping": "base.yaml"}[how]
    given = _task(folder, "child", str(_docs(tmp_path / "d.jsonl")), extra=f"include: {include}\n")
    (folder / "other.yaml").write_text("include: child.yaml\n")
    base = "- a list\n- not a task\n" if how == "not a mapping" else "output_type: multiple_choice\n"
    (folder / "base.yaml").write_text(base)
    needles = {"missing": ("nothere.yaml", "does not exist"), "list": ("nothere.yaml", "does not exist"),
               "cycle": ("include cycle", "child.yaml", "other.yaml"),
               "self": ("include cycle", "child.yaml"), "not a mapping": ("base.yaml", "mapping")}[how]
    _refused(["eval", str(ck), "--tasks", str(given), "--limit", "2", "--out", str(tmp_path / "ev")],
             str(given), *needles)
    assert not (tmp_path / "ev").exists()


@pytest.mark.parametrize("where", ["absolute", "relative", "in the include"])
def test_a_missing_data_file_is_one_line_naming_it(ck, tmp_path, monkeypatch, where):  # noqa: F811
    """Before: the model loaded, the harness started, and datasets' error came after several lines."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "tasks"
    data = {"absolute": str(tmp_path / "gone.jsonl"), "relative": "gone.jsonl"}.get(where, "gone.jsonl")
    given = _task(folder, "t", data)
    if where == "in the include":
        base = given.read_text()
        (folder / "base.yaml").write_text(base.replace("task: t\n", ""))
        given.write_text("include: base.yaml\ntask: t\n")
    line = _refused(["eval", str(ck), "--tasks", str(given), "--limit", "2", "--out", str(tmp_path / "ev")],
                    "gone.jsonl", "data file", "does not exist")
    assert str(folder) in line
    assert not (tmp_path / "ev").exists()


def test_sound_task_files_still_run(ck, tmp_path, monkeypatch):  # noqa: F811
    """The bounds refuse no ordinary task: a data file beside its config (no include: tlm makes it absolute),
    one named from the working directory, an include, and a few aliases."""
    monkeypatch.chdir(tmp_path)
    _docs(tmp_path / "own" / "beside.jsonl")
    _docs(tmp_path / "cwd.jsonl")
    aliases = "metadata:\n  version: &v 1.0\n  again: *v\n"
    # in a folder of its own: the harness is given the folders of the configs, and there the original
    # (relative) config would shadow the copy tlm makes with the absolute path (eval/run.py _harness)
    a = _task(tmp_path / "own", "beside", "beside.jsonl", extra=aliases)
    b = _task(tmp_path / "tasks", "fromcwd", "cwd.jsonl")
    base = b.read_text().replace("task: fromcwd\n", "")
    (tmp_path / "tasks" / "base.yaml").write_text(base)
    c = tmp_path / "tasks" / "inc.yaml"
    c.write_text("include: base.yaml\ntask: inc\n")
    r = runner.invoke(app, ["eval", str(ck), "--tasks", f"{a},{b},{c}", "--limit", "2", "--json",
                            "--out", str(tmp_path / "ev")])
    assert r.exit_code == 0, r.output
    assert {row["task"] for row in json.loads(r.stdout)["results"]} == {"beside", "fromcwd", "inc"}


# ---- 2 and 3. `tlm compare` ------------------------------------------------------------------------------
@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    (tmp_path / "text.txt").write_text("\n\n".join(f"paragraph {i} of a tiny corpus" for i in range(100)))
    monkeypatch.chdir(tmp_path)
    return tmp_path


COMPARE = ["compare", "--data", "text.txt", *TINY, "--seeds", "0"]


@pytest.mark.parametrize("arms, first, second", [
    ("uniform,mlp=uniform", "uniform", "mlp=uniform"),
    ("cosine,cosine:1.5:0.5", "cosine", "cosine:1.5:0.5"),
    ("uniform,sigmoid:1.5:0.5:10,sigmoid:1.50:0.5", "sigmoid:1.5:0.5:10", "sigmoid:1.50:0.5"),
    ("mlp=linear:1.5:0.5+heads=uniform,linear:1.5:0.5", "mlp=linear:1.5:0.5+heads=uniform", "linear:1.5:0.5"),
    ("heads=cosine+kv=uniform,uniform,kv=uniform+heads=cosine:1.5:0.5", "heads=cosine+kv=uniform",
     "kv=uniform+heads=cosine:1.5:0.5"),
])
def test_one_allocation_spelled_twice_is_refused_before_training(work, arms, first, second):
    """Before: both arms trained, and the paired difference was exactly 0 with exit 0."""
    line = _refused([*COMPARE, "--schedules", arms, "--out", "cmp"], f"'{first}'", f"'{second}'",
                    "same allocation")
    assert "list it once" in line
    assert not (work / "cmp").exists()


def test_distinct_arms_are_not_taken_for_one(work):
    from tlm_probe.train.arms import as_arms
    from tlm_probe.train.config import TrainConfig

    base = TrainConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64, multiple_of=16, steps=1)
    arms = ["uniform", "cosine", "cosine:1.5:0.6", "linear", "heads=cosine", "mlp=cosine+heads=cosine",
            "wider-early", "wider-early:2", "sigmoid:1.5:0.5:12"]
    assert [a.name for a in as_arms(base, arms)] == arms


@pytest.mark.parametrize("existing", ["new", "empty", "foreign file"])
@pytest.mark.parametrize("bad, needle", [
    (["--seq-len", "4096"], "training split"),  # longer than the corpus
    (["--seq-len", "1000"], "validation split"),  # longer than its validation split
    (["--d-model", "1048576", "--d-ff", "1048576"], "GiB of memory"),  # weights beyond this machine's memory
])
def test_a_refused_compare_writes_nothing(work, existing, bad, needle):
    """Before: compare_settings.json, the manifest and runs/ were written, then the first run refused."""
    out = work / "cmp"
    if existing != "new":
        out.mkdir()
    if existing == "foreign file":
        (out / "notes.txt").write_text("mine")
    before = snapshot(work)
    _refused([*COMPARE, "--schedules", "uniform,cosine:1.5:0.5", *bad, "--out", "cmp", "--overwrite"], needle)
    assert snapshot(work) == before


@pytest.fixture
def finished(work) -> Path:
    r = runner.invoke(app, [*COMPARE, "--schedules", "uniform,linear:1.5:0.5", "--out", "cmp"])
    assert r.exit_code == 0, r.output
    return work / "cmp"


def test_a_refused_continuation_writes_nothing(finished):
    """A comparison from before manifests (none on disk) whose finished run.json is broken: adopting it
    wrote the manifest before check_runs refused."""
    from tlm_probe.files.fileio import MANIFEST

    before = snapshot(finished.parent)  # a different comparison in the same folder: refused, unchanged
    _refused([*COMPARE, "--schedules", "uniform,linear:1.5:0.5", "--lr", "0.01", "--out", "cmp"],
             "different comparison")
    assert snapshot(finished.parent) == before
    (finished / MANIFEST).unlink()
    (finished / "runs" / "uniform-s0" / "run.json").write_text("{")
    before = snapshot(finished.parent)
    _refused([*COMPARE, "--schedules", "uniform,linear:1.5:0.5", "--out", "cmp"], "run.json")
    assert snapshot(finished.parent) == before


@pytest.mark.parametrize("existing", ["new", "empty"])
def test_a_full_disk_while_compare_sets_up_leaves_the_folder_as_it_was(work, monkeypatch, existing):
    """Before: the manifest and runs/ stayed behind when compare_settings.json hit a full disk."""
    import tlm_probe.train.compare as cmp
    from tlm_probe.files import fileio

    real = cmp.atomic_write_text

    def full(path, text):
        if Path(path).name == cmp.SETTINGS_FILE:
            raise fileio.disk_full_error(Path(path), len(text))
        return real(path, text)

    monkeypatch.setattr(cmp, "atomic_write_text", full)
    if existing == "empty":
        (work / "cmp").mkdir()
    before = snapshot(work)
    _refused([*COMPARE, "--schedules", "uniform,cosine:1.5:0.5", "--out", "cmp"], "disk full",
             "compare_settings.json")
    assert snapshot(work) == before


# ---- 4. messages that state the facts ---------------------------------------------------------------------
def test_a_full_disk_with_no_size_known_says_what_was_written(ck, work, monkeypatch):  # noqa: F811
    """Before: `disk full writing ev: it needs about 0 B, ... free` (a result folder's size is not known
    ahead)."""
    import tlm_probe.results as results

    def full(folder, *a, **k):
        (folder / "results.csv").write_bytes(b"x" * 3000)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(results, "_write_all", full)
    r = runner.invoke(app, ["eval", str(ck), "--ppl-data", "text.txt", "--ppl-tokens", "64", "--out", "ev"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]  # after the progress lines
    assert len(errors) == 1 and r.output.strip().splitlines()[-1] == errors[0], r.output
    line = errors[0]
    for needle in ("disk full writing", "ev", "free", "free some space"):
        assert needle in line, (needle, line)
    assert "0 B" not in line and "2.9 KB" in line
    assert not (work / "ev").exists()


def test_a_short_write_is_a_full_disk_naming_the_file(ck, work, monkeypatch):  # noqa: F811
    """numpy's tofile (gguf's tensor writer) reports a full disk as `OSError: 1024 requested and 312
    written`, without errno: before, that was the whole message."""
    import gguf

    def short(self, *a, **k):
        raise OSError("1024 requested and 312 written")

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", short)
    _refused(["export", str(ck), "--gguf", "--out", "x.gguf"], "disk full writing", "x.gguf", "needs about",
             "free some space")
    assert not (work / "x.gguf").exists()


def test_disk_full_messages_at_the_helper():
    from tlm_probe.errors import UserError
    from tlm_probe.files import fileio

    assert fileio.is_disk_full(OSError("1024 requested and 312 written"))
    assert not fileio.is_disk_full(OSError("1024 requested"))
    msg = str(fileio.disk_full_error(Path("/nonexistent/dir/f.bin"), 0))
    assert "0 B" not in msg and "/nonexistent/dir/f.bin" in msg and "free some space" in msg
    assert isinstance(fileio.disk_full_error(Path("f"), 10), UserError)


# ---- 5. analyses.study collect ------------------------------------------------------------------------
def _study(monkeypatch, tmp_path: Path, *argv: str):
    """`python -m analyses.study ARGV` in this process, writing into tmp_path/results (not the repo's)."""
    from analyses import study

    monkeypatch.setattr(study, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(sys, "argv", ["study", *argv])
    study.main()


def _study_refused(monkeypatch, tmp_path: Path, argv: list[str], *needles: str) -> str:
    with pytest.raises(SystemExit) as e:
        _study(monkeypatch, tmp_path, *argv)
    assert isinstance(e.value.code, str), e.value.code  # sys.exit("error: ..."): printed, exit status 1
    return _one_line(e.value.code, needles)


def test_collect_of_a_hand_made_compare_json_is_one_line(tmp_path, monkeypatch):
    """Before: KeyError: 'settings' (a traceback)."""
    part = tmp_path / "runs" / "motivating"
    part.mkdir(parents=True)
    (part / "compare.json").write_text(json.dumps({"arms": ["uniform"], "results": []}))
    _study_refused(monkeypatch, tmp_path, ["collect", "--root", str(tmp_path / "runs")],
                   str(part / "compare.json"), "settings")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("text, needle", [("{", "not valid JSON"), ("[1]", "JSON object"),
                                          ('{"settings": [], "baseline": "uniform"}', "settings")])
def test_collect_of_a_broken_compare_json_is_one_line(tmp_path, monkeypatch, text, needle):
    part = tmp_path / "runs" / "schedules"
    part.mkdir(parents=True)
    (part / "compare.json").write_text(text)
    _study_refused(monkeypatch, tmp_path, ["collect", "--root", str(tmp_path / "runs")], "compare.json",
                   needle)
    assert not (tmp_path / "results").exists()


def test_collect_of_a_compare_json_without_its_tables_is_one_line(tmp_path, monkeypatch):
    part = tmp_path / "runs" / "mixers"
    part.mkdir(parents=True)
    (part / "compare.json").write_text(json.dumps({"settings": {}, "baseline": "uniform"}))
    (part / "results.csv").write_text("arm,seed\nuniform,0\n")
    _study_refused(monkeypatch, tmp_path, ["collect", "--root", str(tmp_path / "runs")],
                   "summary.csv", str(part))
    (part / "summary.csv").write_text("arm,n_seeds\nuniform,1\n")  # cut down by hand
    (part / "paired.csv").write_text("\n")
    _study_refused(monkeypatch, tmp_path, ["collect", "--root", str(tmp_path / "runs")],
                   "summary.csv", "val_loss_mean")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("parts", ["", "mixers", "nosuchpart"])
def test_collect_with_no_runs_is_one_line_not_a_silent_exit_0(tmp_path, monkeypatch, parts):
    """Before: exit 0 and nothing said (summary.md rewritten from whatever sections were there)."""
    root = tmp_path / "runs"
    argv = ["collect", "--root", str(root), *(["--parts", parts] if parts else [])]
    needles = ("nosuchpart",) if parts == "nosuchpart" else ("nothing to collect", str(root))
    _study_refused(monkeypatch, tmp_path, argv, *needles)
    assert not (tmp_path / "results").exists() and not root.exists()


def test_collect_library_call_keeps_committed_sections(tmp_path, monkeypatch):
    """The library call (tests/test_study_collect.py) still rebuilds summary.md from the sections."""
    from analyses import study

    (tmp_path / "results" / "motivating").mkdir(parents=True)
    (tmp_path / "results" / "motivating" / "section.md").write_text("## motivating\n\n")
    monkeypatch.setattr(study, "RESULTS", tmp_path / "results")
    (tmp_path / "runs").mkdir()
    study.collect(argparse.Namespace(root=tmp_path / "runs", scale="cpu", parts=""))
    assert (tmp_path / "results" / "summary.md").read_text().endswith("## motivating\n\n")
    shutil.rmtree(tmp_path / "results")
