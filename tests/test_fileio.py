"""fileio: files follow the umask, overwrite touches only files tlm wrote, one writer per folder, a full
disk is one line and leaves the previous checkpoint."""

import errno
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from tlm_probe.data.tokens import write_shard
from tlm_probe.errors import UserError
from tlm_probe.files import fileio, folder_lock, out_folder
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.results import write_results
from tlm_probe.train import checkpoint

TABLE = pd.DataFrame({"model": ["m"], "layer": [0], "depth": [0.0], "statistic": ["s"], "value": [0.5],
                      "ci_low": [0.4], "ci_high": [0.6], "n_tokens": [10], "d_ff": [64]})


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.fixture(params=[0o022, 0o002])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _tiny() -> TaperedLM:
    torch.manual_seed(0)
    cfg = TLMConfig(vocab_size=32, d_model=16, n_layers=2, n_heads=2, d_ff=(32, 32), max_seq_len=8)
    return TaperedLM(cfg)


def test_every_writer_follows_the_umask(tmp_path, umask):
    want_file, want_dir = 0o666 & ~umask, 0o777 & ~umask
    assert fileio.umask() == umask  # read from /proc without changing it
    save_tlm(_tiny(), tmp_path / "ck")
    write_shard(tmp_path / "s.tok", np.arange(5), 32, "h", 5)
    write_results(tmp_path / "res", TABLE, None, {"x": 1})
    model = _tiny()
    opt = torch.optim.AdamW(model.parameters())
    step = checkpoint.save_state(tmp_path / "run", model.state_dict(), opt.state_dict(), 3, 30, 2)
    files = [tmp_path / "ck" / "model.safetensors", tmp_path / "ck" / "config.json", tmp_path / "s.tok",
             tmp_path / "res" / "results.csv", tmp_path / "res" / "provenance.json",
             step / "model.safetensors", step / "trainer.pt"]
    assert {str(f): oct(_mode(f)) for f in files} == {str(f): oct(want_file) for f in files}
    for folder in (tmp_path / "res", step):
        assert _mode(folder) == want_dir, folder


def test_publish_replaces_only_its_own_entries(tmp_path):
    out = tmp_path / "res"
    write_results(out, TABLE, TABLE.rename(columns={"layer": "layer_i"}).assign(layer_j=0), {})
    assert (out / "matrices.csv").is_file()
    (out / "NOTES.md").write_text("mine")
    write_results(out, TABLE.assign(value=0.7), None, {})  # no matrices this time: the old ones go
    assert sorted(p.name for p in out.iterdir()) == [".tlm-manifest.json", "NOTES.md", "provenance.json",
                                                     "results.csv", "results.parquet"]
    assert (out / "NOTES.md").read_text() == "mine"
    (out / "results.csv").unlink()
    (out / "results.csv").write_text("the user's own table")  # same name, not in tlm's manifest any more
    manifest = json.loads((out / fileio.MANIFEST).read_text())
    manifest["entries"].remove("results.csv")
    (out / fileio.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="tlm did not write it"):
        write_results(out, TABLE, None, {})
    assert (out / "results.csv").read_text() == "the user's own table"


def test_remove_owned_keeps_foreign_files_and_nested_folders(tmp_path):
    out = tmp_path / "cmp"
    fileio.record(out, ["results.csv", "runs/a-s0", "state"], "compare")
    for rel in ("results.csv", "runs/a-s0/x.json", "state/step_1/w", "runs/NOTES.md", "thesis.tex"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(rel)
    kept = fileio.remove_owned(out)
    assert kept == ["runs", "thesis.tex"]
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == ["runs", "runs/NOTES.md", "thesis.tex"]


def test_claim_rules(tmp_path, capsys):
    out = tmp_path / "o"
    assert out_folder.claim(out, overwrite=False) == []  # new folder
    out.mkdir()
    assert out_folder.claim(out, overwrite=False) == []  # empty folder
    (out / "notes.txt").write_text("x")
    with pytest.raises(UserError, match="not empty and tlm did not write it"):
        out_folder.claim(out, overwrite=False)
    assert out_folder.claim(out, overwrite=True, writes=("a.csv",)) == ["notes.txt"]
    assert "keeps 1 file(s) tlm did not write: notes.txt" in capsys.readouterr().err
    with pytest.raises(UserError, match="refusing to replace .*notes.txt"):
        out_folder.claim(out, overwrite=True, writes=("notes.txt",))
    fileio.record(out, ["a.csv"], "probe")
    with pytest.raises(UserError, match="already exists; pass --overwrite"):
        out_folder.claim(out, overwrite=False)
    assert out_folder.claim(out, overwrite=False, own_needs_overwrite=False) == ["notes.txt"]
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match="is a file"):
        out_folder.claim(tmp_path / "f" / "sub", overwrite=True)


def test_second_writer_gets_the_holders_pid(tmp_path):
    out = tmp_path / "run"
    with folder_lock.folder_lock(out):
        with folder_lock.folder_lock(out):  # the same process may nest (demo -> compare -> train)
            pass
        code = f"""
            from tlm_probe.files import folder_lock
            from tlm_probe.errors import UserError
            try:
                with folder_lock.folder_lock({str(out)!r}):
                    print("got it")
            except UserError as e:
                print(e)
        """
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                           env=env, timeout=60)
        assert f"being written by another tlm process (pid {os.getpid()})" in r.stdout, r.stdout + r.stderr
    assert not folder_lock.lock_path(out.absolute()).exists()  # released and removed


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    out = tmp_path / "run"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folder_lock.lock_path(out).write_text(f"{dead.pid}\n")  # left by a writer that was killed: no flock held
    stale_tmp = tmp_path / ".run.tmp-abc"  # and its half-written temporary folder
    stale_tmp.mkdir()
    (stale_tmp / "results.csv").write_text("half")
    with folder_lock.folder_lock(out):
        assert folder_lock.lock_path(out).read_text().strip() == str(os.getpid())
        assert not stale_tmp.exists()


def test_disk_full_is_one_line_and_removes_the_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "big.bin"
    with pytest.raises(UserError, match=r"disk full writing .*big.bin: it needs about 1\.0 MB, .* free"):
        with fileio.atomic_path(target, need=1 << 20) as tmp:
            tmp.write_bytes(b"x" * 10)
            raise OSError(errno.ENOSPC, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_disk_full_during_a_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch):
    model = _tiny()
    opt = torch.optim.AdamW(model.parameters())
    run = tmp_path / "run"
    first = checkpoint.save_state(run, model.state_dict(), opt.state_dict(), 1, 10, 2)
    before = {p.name: p.read_bytes() for p in first.iterdir()}

    def full(sd, path):  # what torch/safetensors raise when the disk fills mid-write
        Path(path).write_bytes(b"partial")
        raise RuntimeError("[enforce fail at inline_container.cc:626] . PytorchStreamWriter failed writing "
                           "file data/0: file write failed: No space left on device")

    monkeypatch.setattr(checkpoint, "_save_weights", full)
    with pytest.raises(UserError, match=r"disk full writing .*step_0000002: it needs about"):
        checkpoint.save_state(run, model.state_dict(), opt.state_dict(), 2, 20, 2)
    assert [p.name for p in (run / "state").iterdir()] == ["step_0000001"]  # no temporary left
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before


def test_drop_entry_deletes_only_an_unchanged_entry_tlm_wrote(tmp_path):
    from tlm_probe.files.content_hash import file_sha256
    from tlm_probe.files.fileio import _write_manifest, drop_entry, read_manifest

    (tmp_path / "a.png").write_text("tlm's")
    (tmp_path / "b.png").write_text("tlm's, since changed")
    (tmp_path / "c.png").write_text("the user's")
    _write_manifest(tmp_path, "compare", "compare", ["a.png", "b.png"],
                    {"a.png": [file_sha256(tmp_path / "a.png")], "b.png": ["0" * 64]})
    assert not drop_entry(tmp_path, "c.png", "compare") and (tmp_path / "c.png").exists()  # not tlm's
    assert not drop_entry(tmp_path, "b.png", "compare") and (tmp_path / "b.png").exists()  # changed since
    assert drop_entry(tmp_path, "a.png", "compare") and not (tmp_path / "a.png").exists()
    assert read_manifest(tmp_path) == ["b.png"]
