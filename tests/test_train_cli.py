"""tlm train / data / compare on bad input: exit 1, one line on stderr, nothing half-written."""

import hashlib
import json
from pathlib import Path

import pytest
from tiny_flags import TINY
from typer.testing import CliRunner

from cli import app

runner = CliRunner()


@pytest.fixture
def corpus(tmp_path) -> str:
    text = "\n\n".join(f"paragraph {i}: the tapered model reads word {i * 7 % 13} twice" for i in range(200))
    (tmp_path / "corpus.txt").write_text(text)
    return str(tmp_path / "corpus.txt")


def _fails_cleanly(args, *must_not_exist: Path) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 1, (r.exit_code, r.output, r.exception)
    err = r.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in r.output, err
    for path in must_not_exist:
        assert not path.exists(), f"{path} was left behind"
    return err


def _tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p.relative_to(folder)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def test_train_writes_a_checkpoint_folder_from_toml_and_flags(tmp_path, corpus):
    (tmp_path / "c.toml").write_text('[train]\nlr = 0.002\nschedule = "linear:1.5:0.5"\nseed = 3\n')
    r = runner.invoke(
        app,
        [
            "train",
            "--out",
            str(tmp_path / "run"),
            "--config",
            str(tmp_path / "c.toml"),
            "--data",
            corpus,
            "--seed",
            "4",
            "--json",
            *TINY,
        ],
    )
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    saved = json.loads((tmp_path / "run" / "train_config.json").read_text())
    assert (saved["lr"], saved["schedule"], saved["seed"]) == (0.002, "linear:1.5:0.5", 4)  # flag wins
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["model_type"] == "tlm" and cfg["d_ff"] == summary["d_ff"] == [96, 32]
    names = {p.name for p in (tmp_path / "run").iterdir()}
    assert {"config.json", "model.safetensors", "metrics.jsonl", "state", "tlm_tokenizer.json"} <= names
    kinds = [json.loads(x)["kind"] for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert kinds.count("eval") == 2 and "train" in kinds


def test_empty_corpus(tmp_path):
    (tmp_path / "empty.txt").write_text("\n \n\n")
    out = tmp_path / "run"
    err = _fails_cleanly(["train", "--out", str(out), "--data", str(tmp_path / "empty.txt"), *TINY], out)
    assert "empty.txt" in err


def test_tokenizer_vocab_must_match_model(tmp_path, corpus):
    out = tmp_path / "run"
    err = _fails_cleanly(
        [
            "train",
            "--out",
            str(out),
            "--data",
            corpus,
            "--tokenizer",
            "bpe:300",
            "--vocab-size",
            "256",
            *TINY,
        ],
        out,
    )
    assert "300" in err and "256" in err


def test_seq_len_above_context(tmp_path, corpus):
    out = tmp_path / "run"
    err = _fails_cleanly(
        [
            "train",
            "--out",
            str(out),
            "--data",
            corpus,
            "--preset",
            "tlm-tiny",
            "--steps",
            "2",
            "--seq-len",
            "512",
        ],
        out,
    )
    assert "512" in err and "256" in err


def test_splits_shorter_than_a_sequence(tmp_path):
    (tmp_path / "short.txt").write_text("\n\n".join(f"p{i}" for i in range(60)))  # ~3 bytes a document
    out = tmp_path / "run"
    err = _fails_cleanly(["train", "--out", str(out), "--data", str(tmp_path / "short.txt"), *TINY,
                          "--seq-len", "64"], out)
    assert "seq_len+1=65" in err


def test_existing_output_needs_overwrite(tmp_path, corpus):
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    err = _fails_cleanly(["train", "--out", str(out), "--data", corpus, *TINY])
    assert "--overwrite" in err and (out / "keep.txt").read_text() == "mine"


def test_overwrite_only_replaces_our_own_folders(tmp_path, corpus):
    arms = ["--seeds", "0", "--schedules", "uniform,linear:1.5:0.5"]
    commands = [["train", "--data", corpus, *TINY], ["compare", *arms, "--data", corpus, *TINY],
                ["data", "prepare", corpus]]
    for i, args in enumerate(commands):  # refused without --overwrite; with it, tlm writes beside notes.txt
        precious = tmp_path / f"project{i}"
        precious.mkdir()
        (precious / "notes.txt").write_text("keep")
        err = _fails_cleanly([*args, "--out", str(precious)])
        assert "tlm did not write it" in err and (precious / "notes.txt").read_text() == "keep"
        for _ in range(2):  # a second --overwrite replaces the same command's own files, not notes.txt
            r = runner.invoke(app, [*args, "--out", str(precious), "--overwrite"])
            assert r.exit_code == 0, r.output
            assert "notes.txt" in r.output and (precious / "notes.txt").read_text() == "keep"
    # issue 18: --overwrite never replaces the output of another kind of command
    err = _fails_cleanly([*commands[2], "--out", str(tmp_path / "project0"), "--overwrite"])
    assert "holds the output of `tlm train`" in err
    assert sorted(p.name for p in (tmp_path / "project2").iterdir()) == [
        ".tlm-manifest.json", "meta.json", "notes.txt", "tokenizer", "train", "val"]


def test_unwritable_output(tmp_path, corpus):
    (tmp_path / "a_file").write_text("x")
    out = tmp_path / "a_file" / "run"
    _fails_cleanly(["train", "--out", str(out), "--data", corpus, *TINY])
    assert (tmp_path / "a_file").read_text() == "x"


@pytest.mark.parametrize("change", [["--lr", "0.01"], ["--schedule", "cosine:1.5:0.5"], ["--d-ff", "128"]])
def test_resume_with_a_different_config_is_refused(tmp_path, corpus, change):
    out = tmp_path / "run"
    base = ["train", "--out", str(out), "--data", corpus, "--steps", "4", *TINY[2:]]
    assert runner.invoke(app, [*base, "--stop-at", "2"]).exit_code == 0
    before = _tree_digest(out)
    err = _fails_cleanly([*base, "--resume", *change])
    assert "different config" in err
    assert _tree_digest(out) == before
    r = runner.invoke(app, [*base, "--resume", "--json"])  # the same config resumes and finishes
    assert r.exit_code == 0 and json.loads(r.stdout)["step"] == 4


@pytest.mark.parametrize(
    "args",
    [
        ["--schedule", "zigzag"],
        ["--preset", "tlm-huge"],
        ["--tokenizer", "bpe:x"],
        ["--batch-size", "0"],
        ["--data", "builtin:nothing"],
        ["--config", "missing.yaml"],
    ],
)
def test_other_bad_training_input(tmp_path, corpus, args):
    out = tmp_path / "run"
    _fails_cleanly(["train", "--out", str(out), "--data", corpus, *TINY, *args], out)


def test_bad_yaml_config(tmp_path, corpus):
    (tmp_path / "c.yaml").write_text("lr: [unclosed\n")
    out = tmp_path / "run"
    _fails_cleanly(["train", "--out", str(out), "--config", str(tmp_path / "c.yaml"), *TINY], out)
    (tmp_path / "d.yaml").write_text("learning_rate: 0.1\n")
    assert "learning_rate" in _fails_cleanly(
        ["train", "--out", str(out), "--config", str(tmp_path / "d.yaml")]
    )


def test_data_prepare_bad_input(tmp_path, corpus):
    out = tmp_path / "prep"
    _fails_cleanly(["data", "prepare", str(tmp_path / "nothing.txt"), "--out", str(out)], out)
    _fails_cleanly(["data", "prepare", corpus, "--out", str(out), "--tokenizer", "bpe:abc"], out)
    out.mkdir()
    (out / "mine.txt").write_text("x")  # an empty folder may be written; one with the user's files not
    _fails_cleanly(["data", "prepare", corpus, "--out", str(out)])
    assert [p.name for p in out.iterdir()] == ["mine.txt"] and not list(tmp_path.glob(".prep.tmp-*"))


def test_compare_bad_input(tmp_path, corpus):
    out = tmp_path / "cmp"
    _fails_cleanly(["compare", "--out", str(out), "--seeds", "a,b", "--data", corpus, *TINY], out)
    _fails_cleanly(["compare", "--out", str(out), "--schedules", "uniform,uniform", *TINY], out)
    _fails_cleanly(["compare", "--out", str(out), "--schedules", "uniform,bogus", *TINY], out)


def test_compare_and_demo_unwritable_output(tmp_path, corpus):
    (tmp_path / "a_file").write_text("x")
    compare = ["compare", "--schedules", "uniform,cosine:1.5:0.5", "--data", corpus, *TINY]
    for args in (compare, ["demo", "--quick", "--steps", "2"]):
        err = _fails_cleanly([*args, "--out", str(tmp_path / "a_file" / "cmp")])
        assert "cannot be created" in err
        if Path("/proc").is_dir():  # a folder where nothing can be made, even as root
            assert "cannot be written" in _fails_cleanly([*args, "--out", "/proc/tlm-cmp"])
