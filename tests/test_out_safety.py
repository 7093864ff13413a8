"""Issue 18, data safety: a command never writes where it reads, never replaces another command's output,
treats a manifest as untrusted data, locks the folder itself (not a name for it) without following links,
and a full disk during checkpoint writing is one line with nothing half-written left.

Every CLI case checks the contract of a refusal: exit code 1, one line `error: ...`, no traceback, and the
whole work folder unchanged (names and bytes before and after)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from tiny_flags import TINY
from typer.testing import CliRunner

from cli import app
from tlm_probe.data.prepare import prepare
from tlm_probe.errors import UserError
from tlm_probe.files import fileio, folder_lock, out_folder
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.results import write_results
from tlm_probe.tokenizer import ByteTokenizer
from tlm_probe.train import checkpoint
from tlm_probe.train.run import RUN_FILES

runner = CliRunner()
TABLE = pd.DataFrame({"model": ["m"] * 2, "layer": [0, 1], "depth": [0.0, 1.0],
                      "statistic": ["align_mlp_mid"] * 2, "value": [0.1, 0.2], "ci_low": [0.0, 0.1],
                      "ci_high": [0.2, 0.3], "n_tokens": [10, 10], "d_ff": [64, 64]})
# torch's zip writer on a full tmpfs (measured: torch.save of 400 KB onto a 120 KB tmpfs): no errno, no
# "No space left" in the text
TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"


def _checkpoint(folder: Path) -> Path:
    """A byte-level checkpoint folder as `tlm train` leaves it: weights, config, tokenizer, metrics, a
    resumable state and the manifest of kind train."""
    torch.manual_seed(0)
    save_tlm(TaperedLM(TLMConfig(d_model=32, n_layers=2, n_heads=2, d_ff=(64, 64), max_seq_len=64)), folder)
    ByteTokenizer().save(folder)
    (folder / "metrics.jsonl").write_text('{"step": 1, "train_loss": 5.5}\n')
    (folder / "state" / "step_0000001").mkdir(parents=True)
    (folder / "state" / "step_0000001" / "state.json").write_text('{"step": 1}\n')
    fileio.record(folder, [*RUN_FILES[:7], "tlm_tokenizer.json"], "train")
    return folder


@pytest.fixture
def work(tmp_path, monkeypatch):
    """models/ck (a run folder), probe/ (a probe result, with the user's ids.npy beside), cmp/ (a
    comparison), prep/ (prepared token shards), the user's text and token ids, and a symbolic link
    `via` -> models (a second name for the checkpoint's parent)."""
    _checkpoint(tmp_path / "models" / "ck")
    write_results(tmp_path / "probe", TABLE, None, {"model": "m", "backend": "native"})
    cmp = tmp_path / "cmp"
    fileio.record(cmp, ["compare_settings.json", "results.csv", "summary.csv", "runs/uniform-s0"], "compare")
    for name in ("compare_settings.json", "results.csv", "summary.csv", "runs/uniform-s0/run.json"):
        (cmp / name).parent.mkdir(parents=True, exist_ok=True)
        (cmp / name).write_text(f"{name} of the comparison\n")
    (tmp_path / "text.txt").write_text("def f(x):\n    return x\n" * 400)
    np.save(tmp_path / "ids.npy", (np.arange(4000) % 200).astype(np.int64))
    (tmp_path / "via").symlink_to(tmp_path / "models", target_is_directory=True)
    (tmp_path / "probe" / "ids.npy").write_bytes((tmp_path / "ids.npy").read_bytes())  # the user's, beside
    docs = "".join(json.dumps({"text": f"def f{i}(x):\n    return x * {i}\n" * 8}) + "\n" for i in range(200))
    (tmp_path / "docs.jsonl").write_text(docs)  # documents enough for both splits (each 1 in 20 is val)
    prepare(str(tmp_path / "docs.jsonl"), tmp_path / "prep")  # token shards of `tlm data prepare`
    (tmp_path / "prep" / "docs.jsonl").write_text(docs)  # the user's copy of the corpus, beside them
    monkeypatch.chdir(tmp_path)
    return tmp_path


def snapshot(root: Path) -> dict[str, str]:
    def digest(p: Path) -> str:
        if p.is_symlink():
            return f"link->{os.readlink(p)}"
        return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"

    return {str(p.relative_to(root)): digest(p) for p in sorted(root.rglob("*"))}


def refused(work: Path, argv: list[str], needle: str, after_progress: bool = False) -> str:
    """Exit 1, one `error:` line (after a training progress bar's line when `after_progress`), no
    traceback, and every file in `work` as it was."""
    before = snapshot(work)
    r = runner.invoke(app, argv)
    lines = r.output.strip().splitlines()
    assert r.exit_code == 1, (r.exit_code, r.output, r.exception)
    assert "Traceback" not in r.output
    assert len(lines) == 1 or (after_progress and not any("error" in ln for ln in lines[:-1])), r.output
    assert lines[-1].startswith("error: ") and needle in lines[-1], r.output
    assert snapshot(work) == before, "the work folder changed"
    return lines[-1]


# ---- 1. --out is never an input, inside one, or around one ---------------------------------------
APART = [
    ("probe CK --out CK", ["probe", "models/ck", "--data", "ids.npy", "--out", "models/ck"], "is the input"),
    ("probe CK --out CK through a linked parent",
     ["probe", "models/ck", "--data", "ids.npy", "--out", "via/ck"], "is the input"),
    ("probe CK --out CK/probe",
     ["probe", "models/ck", "--data", "ids.npy", "--out", "models/ck/p"], "lies inside"),
    ("probe CK --out PARENT --overwrite",
     ["probe", "models/ck", "--data", "ids.npy", "--out", "models", "--overwrite"], "contains"),
    ("probe --data inside --out", ["probe", "models/ck", "--data", "probe/ids.npy", "--out", "probe"],
     "contains the input probe/ids.npy"),
    ("report CK --out CK", ["report", "models/ck", "--out", "models/ck"], "is the input"),
    ("report PROBE --out PROBE", ["report", "probe", "--out", "probe"], "is the input"),
    ("report PROBE --out PROBE --overwrite",
     ["report", "probe", "--out", "probe", "--overwrite"], "is the input"),
    ("eval CK --out CK", ["eval", "models/ck", "--tasks", "pydoc-mc", "--out", "via/ck"], "is the input"),
    ("eval --ppl-data PROBE/x --out PROBE",
     ["eval", "models/ck", "--ppl-data", "probe/results.csv", "--out", "probe"], "contains the input"),
    ("train --data PREP --out PREP --overwrite",
     ["train", "--data", "prep", "--out", "prep", "--overwrite", *TINY], "is the input"),
    ("data prepare PREP/docs --out PREP --overwrite",
     ["data", "prepare", "prep/docs.jsonl", "--out", "prep", "--overwrite"], "contains the input"),
]


@pytest.mark.parametrize("argv,needle", [c[1:] for c in APART], ids=[c[0] for c in APART])
def test_out_apart_from_the_inputs(work, argv, needle):
    refused(work, argv, needle)


# ---- 2. --overwrite replaces only what the same kind of command wrote ------------------------------
KINDS = [
    ("train --out CMP --overwrite", ["train", "--data", "ids.npy", "--out", "cmp", "--overwrite", *TINY],
     "holds the output of `tlm compare`"),
    ("report --out CMP --overwrite", ["report", "probe", "--out", "cmp", "--overwrite"],
     "holds the output of `tlm compare`"),
    ("data prepare --out CK --overwrite",
     ["data", "prepare", "docs.jsonl", "--out", "models/ck", "--overwrite"],
     "holds the output of `tlm train`"),
    ("compare --out RUN", ["compare", "--data", "ids.npy", "--out", "models/ck", *TINY,
                           "--schedules", "uniform,cosine:1.5:0.5"], "holds the output of `tlm train`"),
    ("compare --out RUN --overwrite", ["compare", "--data", "ids.npy", "--out", "models/ck", "--overwrite",
                                       *TINY, "--schedules", "uniform,cosine:1.5:0.5"],
     "holds the output of `tlm train`"),
    ("train --resume --out CMP", ["train", "--data", "ids.npy", "--out", "cmp", "--resume", *TINY],
     "holds the output of `tlm compare`"),
    ("eval --out PROBE", ["eval", "models/ck", "--tasks", "pydoc-mc", "--out", "probe"],
     "holds the output of `tlm probe`"),
    ("probe --out CMP --overwrite",
     ["probe", "models/ck", "--data", "ids.npy", "--out", "cmp", "--overwrite"],
     "holds the output of `tlm compare`"),
]


@pytest.mark.parametrize("argv,needle", [c[1:] for c in KINDS], ids=[c[0] for c in KINDS])
def test_another_commands_folder_is_refused(work, argv, needle):
    refused(work, argv, needle)


def test_the_same_kind_still_replaces_its_own(work):
    write_results(work / "probe", TABLE.assign(value=0.9), None, {"model": "m"})  # a probe over a probe
    assert pd.read_csv(work / "probe" / "results.csv")["value"].tolist() == [0.9, 0.9]
    assert fileio.manifest_kind(work / "probe") == "probe"
    fileio.record(work / "cmp", ["sweep.csv"], "sweep")  # a sweep adds its table to its comparison
    doc = json.loads((work / "cmp" / fileio.MANIFEST).read_text())
    assert (doc["kind"], doc["command"]) == ("compare", "sweep")
    assert out_folder.claim(work / "cmp", overwrite=True, own_needs_overwrite=False, kind="demo") == []
    with pytest.raises(UserError, match="holds the output of `tlm compare`; `tlm eval`"):
        write_results(work / "cmp", TABLE, None, {}, kind="eval")


def _legacy(folder: Path, command: str | None, provenance: dict | None = None) -> Path:
    """A manifest as tlm wrote it before kinds existed: "command" is the last command that recorded."""
    folder.mkdir()
    (folder / "results.csv").write_text("old\n")
    entries = ["results.csv", *(["provenance.json"] if provenance is not None else [])]
    doc = {"written_by": "tlm_probe", "entries": entries} | ({"command": command} if command else {})
    (folder / fileio.MANIFEST).write_text(json.dumps(doc))
    if provenance is not None:
        (folder / "provenance.json").write_text(json.dumps(provenance))
    return folder


def test_old_manifests_without_a_kind(tmp_path):
    """The last command maps to the folder's kind (sweep and demo recorded into comparisons, eval results
    went through the probe's writer and are told by their provenance); no command at all: refused."""
    assert fileio.manifest_kind(_legacy(tmp_path / "s", "sweep")) == "compare"
    assert fileio.manifest_kind(_legacy(tmp_path / "d", "demo")) == "compare"
    assert fileio.manifest_kind(_legacy(tmp_path / "t", "train")) == "train"
    ev = _legacy(tmp_path / "e", "probe", {"model": "m", "tasks": [], "perplexity": []})
    pr = _legacy(tmp_path / "p", "probe", {"model": "m", "backend": "native"})
    assert (fileio.manifest_kind(ev), fileio.manifest_kind(pr)) == ("eval", "probe")
    with pytest.raises(UserError, match="holds the output of `tlm eval`"):
        out_folder.claim(ev, overwrite=True, kind="probe")
    with pytest.raises(UserError, match="records no content hash"):  # a probe's files, unhashed: not replaced
        out_folder.claim(pr, overwrite=False, own_needs_overwrite=False, kind="probe")
    assert out_folder.claim(_legacy(tmp_path / "c", "compare"), overwrite=False, own_needs_overwrite=False,
                        kind="compare") == []  # a comparison's files are never hashed: the name rules decide
    with pytest.raises(UserError, match="manifest does not name"):
        out_folder.claim(_legacy(tmp_path / "n", None), overwrite=True, kind="probe")
    fileio.record(pr, ["matrices.csv"], "probe")  # the next write records the kind
    assert json.loads((pr / fileio.MANIFEST).read_text())["kind"] == "probe"


# ---- 3. a manifest is untrusted data ---------------------------------------------------------------
def _poisoned(work: Path, entry_for) -> tuple[Path, Path]:
    """probe/'s manifest (a probe result received from someone else) names one more entry, built from
    the path of a victim file of the user's outside it."""
    victim = work / "victim" / "thesis.tex"
    victim.parent.mkdir()
    victim.write_text("a year of work")
    (work / "probe" / "linkdir").symlink_to(victim.parent, target_is_directory=True)
    (work / "probe" / "linkfile").symlink_to(victim)
    man = work / "probe" / fileio.MANIFEST
    doc = json.loads(man.read_text())
    doc["entries"].append(entry_for(victim))
    man.write_text(json.dumps(doc))
    return victim, man


BAD_ENTRIES = [
    ("absolute", lambda v: str(v), "is an absolute path"),
    ("dotdot", lambda v: "../victim/thesis.tex", "climbs out"),
    ("dotdot inside", lambda v: "linkdir/../../victim/thesis.tex", "climbs out"),
    ("the folder itself", lambda v: ".", "names the folder itself"),
    ("empty", lambda v: "", "is not a file name"),
    ("not a string", lambda v: 7, "is not a file name"),
    ("through a linked folder", lambda v: "linkdir/thesis.tex", "passes through the symbolic link"),
    ("a link", lambda v: "linkfile", "passes through the symbolic link"),
]


@pytest.mark.parametrize("entry_for,needle", [c[1:] for c in BAD_ENTRIES], ids=[c[0] for c in BAD_ENTRIES])
def test_a_manifest_entry_outside_the_folder_is_refused(work, entry_for, needle):
    victim, man = _poisoned(work, entry_for)
    line = refused(work, ["probe", "models/ck", "--data", "ids.npy", "--out", "probe", "--overwrite"], needle)
    assert "refusing to use the manifest" in line
    assert victim.read_text() == "a year of work"
    with pytest.raises(UserError, match=needle):
        fileio.remove_owned(work / "probe")
    assert victim.read_text() == "a year of work" and (work / "probe" / "results.csv").is_file()


def test_remove_owned_deletes_only_real_files_and_folders_inside(tmp_path):
    out = tmp_path / "o"
    fileio.record(out, ["a.csv", "runs/x"], "compare")
    (out / "a.csv").write_text("a")
    (out / "runs" / "x").mkdir(parents=True)
    (out / "runs" / "x" / "inner").symlink_to(tmp_path / "keep")  # rmtree unlinks, never follows
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "f").write_text("kept")
    assert fileio.remove_owned(out) == []
    assert (tmp_path / "keep" / "f").read_text() == "kept"


# ---- 4. locks -------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_the_lock_file_is_never_opened_through_a_link(tmp_path, how):
    victim = tmp_path / "precious.txt"
    victim.write_text("never truncate me")
    out = tmp_path / "run"
    lock = folder_lock.lock_path(out)
    os.symlink(victim, lock) if how == "symlink" else os.link(victim, lock)
    with pytest.raises(UserError, match="refusing to"):
        with folder_lock.folder_lock(out):
            pass
    assert victim.read_text() == "never truncate me"


def test_two_names_of_one_folder_share_its_lock(tmp_path):
    """`--out link` with link -> real/run and `--out real/run`: one folder, so one lock (the lock files
    .link.lock and .run.lock would be two)."""
    real = tmp_path / "real" / "run"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    with folder_lock.folder_lock(real):
        code = f"""
            from tlm_probe.files import folder_lock
            from tlm_probe.errors import UserError
            try:
                with folder_lock.folder_lock({str(tmp_path / "link")!r}):
                    print("got it")
            except UserError as e:
                print(e)
        """
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                           env=env, timeout=120)
        assert "being written by another tlm process" in r.stdout, r.stdout + r.stderr


def _held_by_someone(out: Path) -> bool:
    """Whether another open file holds the flock of `out` (flock locks belong to open files, so a second
    open in this process is refused while the command holds it)."""
    path = folder_lock.lock_path(out.resolve())
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def test_eval_holds_the_lock_while_it_works(work, monkeypatch):
    from tlm_probe.eval import run

    seen = []

    def stop(model, opts, **kwargs):
        seen.append(_held_by_someone(work / "ev"))
        raise UserError("stopped by the test")

    monkeypatch.setattr(run, "run_eval", stop)
    refused(work, ["eval", "models/ck", "--tasks", "pydoc-mc", "--out", "ev"], "stopped by the test")
    assert seen == [True]


def test_report_holds_the_lock_while_it_works(work, monkeypatch):
    from tlm_probe.report import sections

    seen = []

    def stop(inputs, **kwargs):
        seen.append(_held_by_someone(work / "rep"))
        raise UserError("stopped by the test")

    monkeypatch.setattr(sections, "build_document", stop)
    refused(work, ["report", "probe", "--out", "rep"], "stopped by the test")
    assert seen == [True]


# ---- 5. a full disk while a checkpoint is written --------------------------------------------------
def _torch_fills_up(monkeypatch, fail_from: int) -> None:
    """torch.save writes part of the file and raises what its zip writer raises on a full disk."""
    real, calls = torch.save, []

    def save(obj, f, *a, **k):
        calls.append(f)
        if len(calls) < fail_from:
            return real(obj, f, *a, **k)
        Path(f).write_bytes(b"PK\x03\x04 half a zip")
        raise RuntimeError(TORCH_FULL)

    monkeypatch.setattr(checkpoint.torch, "save", save)


def test_full_disk_at_the_first_checkpoint_leaves_no_run_folder(work, monkeypatch):
    _torch_fills_up(monkeypatch, fail_from=1)
    line = refused(work, ["train", "--data", "ids.npy", "--out", "run", *TINY, "--ckpt-interval", "1"],
                   "disk full writing", after_progress=True)
    assert "run/state/step_0000001: it needs about" in line and " free" in line
    assert not (work / "run").exists()


def test_full_disk_at_a_later_checkpoint_keeps_the_previous_one(work, monkeypatch):
    _torch_fills_up(monkeypatch, fail_from=2)
    r = runner.invoke(app, ["train", "--data", "ids.npy", "--out", "run", *TINY, "--ckpt-interval", "1"])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert lines[-1].startswith("error: disk full writing") and "step_0000002" in lines[-1]
    assert sorted(p.name for p in (work / "run" / "state").iterdir()) == ["step_0000001"]  # no partial


def test_full_disk_in_a_comparison_is_one_line_and_no_half_run(work, monkeypatch):
    _torch_fills_up(monkeypatch, fail_from=1)
    r = runner.invoke(app, ["compare", "--data", "ids.npy", "--out", "c", *TINY,
                            "--schedules", "uniform,cosine:1.5:0.5"])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert lines[-1].startswith("error: disk full writing") and "runs/uniform-s0/state/step_" in lines[-1]
    assert not (work / "c" / "runs" / "uniform-s0").exists()
    assert not any(p.name.startswith(".") and "tmp" in p.name for p in work.rglob("*"))
