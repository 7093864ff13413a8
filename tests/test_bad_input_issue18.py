"""Issue 18, malformed files read on resume, as data, as seeds, as task names and by report/plot: each
through the real CLI is exit code 1, exactly one line `error: ...`, no traceback, and the work folder is
unchanged (names and bytes of every file before and after), as in the bad-input catalogue."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_bad_input_catalogue import snapshot
from tiny_flags import TINY
from typer.testing import CliRunner

from cli import app
from tlm_probe.data.tokens import HEADER_BYTES, MAGIC, write_shard
from tlm_probe.files.fileio import MANIFEST
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.train.checkpoint import _save_weights, step_folders

runner = CliRunner()
TRAIN = ["train", "--data", "text.txt", *TINY]
# two arms, so that paired.csv has a row (a one-arm comparison writes a paired table without one)
COMPARE = ["compare", "--data", "text.txt", *TINY, "--schedules", "uniform,linear:1.5:0.5", "--seeds", "0"]
HEADER = "model,layer,depth,statistic,value,ci_low,ci_high,n_tokens,d_ff\n"
GOOD_ROW = "m,0,0.0,align_mlp_mid,0.5,0.4,0.6,10,64\n"


def _ok(argv: list[str]) -> None:
    r = runner.invoke(app, argv)
    assert r.exit_code == 0, (argv, r.output, r.exception)


def _copy(root: Path, src: str, dst: str) -> Path:
    shutil.copytree(root / src, root / dst, symlinks=True)
    return root / dst


def _state(run: Path) -> Path:
    return step_folders(run)[-1]


def _edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _resume_cases(root: Path) -> None:
    """Copies of an interrupted run (a checkpoint at step 1 of 2), each with one file broken."""
    _edit_json(_state(_copy(root, "run", "r-norng")) / "state.json", lambda d: d.pop("rng"))
    _edit_json(_state(_copy(root, "run", "r-step")) / "state.json", lambda d: d.update(step="one"))
    _edit_json(_state(_copy(root, "run", "r-fstep")) / "state.json", lambda d: d.update(step=1.5))
    _edit_json(_state(_copy(root, "run", "r-badrng")) / "state.json", lambda d: d.update(rng={"numpy": 1}))
    good = (root / "run" / "metrics.jsonl").read_bytes()
    lines = {"garbage": b"not json at all\n", "utf8": b'{"kind": "eval", "step": 0, "x": "\xff\xfe"}\n',
             "list": b"[1, 2, 3]\n", "nostep": b'{"kind": "train", "loss": 1.0}\n'}
    for name, line in lines.items():  # a bad line that is not a torn last line: a newline follows it
        (_copy(root, "run", f"r-m-{name}") / "metrics.jsonl").write_bytes(line + good)
    (_copy(root, "run", "r-tc") / "train_config.json").write_text('{"seq_len": 16,')
    (_copy(root, "run", "r-tclist") / "train_config.json").write_text("[1, 2]")
    cfg = TLMConfig.from_dict(json.loads((root / "run" / "config.json").read_text()))
    other = TaperedLM(replace(cfg, d_ff=(32, 32)))  # same config but MLPs of another width
    _save_weights(other.state_dict(), _state(_copy(root, "run", "r-width")) / "model.safetensors")


def _compare_cases(root: Path) -> None:
    (_copy(root, "cmp", "c-settings") / "compare_settings.json").write_text('{"arms": [')
    (_copy(root, "cmp", "c-settings-list") / "compare_settings.json").write_text("[]")
    (_copy(root, "cmp", "c-runjson") / "runs" / "uniform-s0" / "run.json").write_text("{")
    (_copy(root, "cmp", "c-runjson-list") / "runs" / "uniform-s0" / "run.json").write_text("[1]")
    # an unfinished run inside a comparison whose checkpoint is broken: refused before the comparison
    # writes anything (its settings, manifest, tables)
    c = _copy(root, "cmp", "c-state")
    shutil.rmtree(c / "runs" / "uniform-s0")
    shutil.copytree(root / "r-norng", c / "runs" / "uniform-s0")
    # what report and plot read
    (_copy(root, "cmp", "rc-json") / "compare.json").write_text('{"settings": ')
    (_copy(root, "cmp", "rc-list") / "compare.json").write_text("[1, 2]")
    s = _copy(root, "cmp", "rc-summary") / "summary.csv"
    head, row = s.read_text().splitlines()[:2]
    cols = head.split(",")
    cells = row.split(",")
    cells[cols.index("val_loss_mean")] = "abc"
    s.write_text(head + "\n" + ",".join(cells) + "\n")


def _data_cases(root: Path) -> None:
    (root / "bad.jsonl").write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9 latin-1"}\n')
    (root / "tok").mkdir()
    ids = np.arange(300) % 64
    changes = {"nontok": lambda h: h.pop("n_tokens"), "strtok": lambda h: h.update(n_tokens="300")}
    for name, change in changes.items():
        header = {"dtype": "uint32", "vocab_size": 64, "tokenizer_hash": "x", "n_tokens": 300, "n_bytes": 1}
        change(header)
        blob = MAGIC + json.dumps(header).encode().ljust(HEADER_BYTES - len(MAGIC), b" ")
        (root / "tok" / f"{name}.tok").write_bytes(blob + ids.astype("<u4").tobytes())
    (_copy(root, "prep", "p-meta") / "meta.json").write_text('{"vocab_size": ')
    _edit_json(_copy(root, "prep", "p-novocab") / "meta.json", lambda d: d.pop("vocab_size"))
    _edit_json(_copy(root, "prep", "p-nokind") / "tokenizer" / "tlm_tokenizer.json", lambda d: d.pop("kind"))
    (_copy(root, "prep", "p-tokjson") / "tokenizer" / "tlm_tokenizer.json").write_text("{")
    p = _copy(root, "prep", "p-ids")  # a shard whose ids pass the byte vocabulary the folder declares
    shard = sorted((p / "train").glob("*.tok"))[0]
    write_shard(shard, np.arange(2000) % 300, 300, "x", 2000)
    (root / "latin1.yaml").write_bytes(b"# caf\xe9\nsteps: 2\n")
    (root / "trainlist.yaml").write_text("train:\n  - steps\n  - 2\n")
    (root / "trainstr.yaml").write_text("train: fast\n")


def _result_cases(root: Path) -> None:
    for name, prov in (("plist", "[1, 2]"), ("pstr", '"text"')):
        (root / name).mkdir()
        (root / name / "results.csv").write_text(HEADER + GOOD_ROW)
        (root / name / "provenance.json").write_text(prov)
    (root / "evalcols").mkdir()
    (root / "evalcols" / "results.csv").write_text("a,b\n1,2\n")
    (root / "evalcols" / "provenance.json").write_text('{"versions": {"lm_eval": "0.4"}}')
    (root / "evalnum").mkdir()
    (root / "evalnum" / "results.csv").write_text("model,task,metric,value,stderr,n\nm,t,acc,high,,5\n")
    (root / "evalnum" / "provenance.json").write_text('{"versions": {"lm_eval": "0.4"}}')
    (root / "good").mkdir()
    (root / "good" / "results.csv").write_text(HEADER + GOOD_ROW)
    (root / "good" / "provenance.json").write_text('{"model": "m"}')
    (root / "dotman").mkdir()
    dot = {"written_by": "tlm_probe", "kind": "report", "entries": ["."]}
    (root / "dotman" / MANIFEST).write_text(json.dumps(dot))
    (root / "dotman" / "keep.txt").write_text("the user's file")
    (_copy(root, "run", "rr-list") / "metrics.jsonl").write_text("[1, 2]\n")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("issue18")
    (root / "text.txt").write_text("\n\n".join(f"paragraph {i} of a tiny corpus" for i in range(100)))
    np.save(root / "ids.npy", np.arange(4096) % 64)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        _ok([*TRAIN, "--out", "run", "--stop-at", "1"])  # interrupted: a checkpoint at step 1 of 2
        _ok([*COMPARE, "--out", "cmp"])
        _ok(["data", "prepare", "text.txt", "--out", "prep"])
    _resume_cases(root)
    _compare_cases(root)
    _data_cases(root)
    _result_cases(root)
    return root


def _resume(folder: str) -> list[str]:
    return [*TRAIN, "--out", folder, "--resume"]


def _train(data: str) -> list[str]:
    return ["train", "--data", data, "--out", "o", *TINY]


CASES = [
    # ---- --resume ----
    ("resume: state.json without rng", "state.json holds no 'rng'", _resume("r-norng")),
    ("resume: state.json step 'one'", "has no integer 'step'", _resume("r-step")),
    ("resume: state.json step 1.5", "has no integer 'step'", _resume("r-fstep")),
    ("resume: state.json rng of the wrong shape", "state.json holds no valid RNG state", _resume("r-badrng")),
    ("resume: metrics.jsonl garbage line", "metrics.jsonl:1 is not valid JSON", _resume("r-m-garbage")),
    ("resume: metrics.jsonl non-UTF-8 line", "metrics.jsonl:1 is not UTF-8", _resume("r-m-utf8")),
    ("resume: metrics.jsonl list line", "metrics.jsonl:1 is not a JSON object", _resume("r-m-list")),
    ("resume: metrics.jsonl line without step", "metrics.jsonl:1 has no integer 'step'",
     _resume("r-m-nostep")),
    ("resume: corrupt train_config.json", "train_config.json is not valid JSON", _resume("r-tc")),
    ("resume: train_config.json a list", "train_config.json does not hold a JSON object",
     _resume("r-tclist")),
    ("resume: state weights of another width", "the run's config implies", _resume("r-width")),
    # ---- continuing a comparison ----
    ("compare: corrupt compare_settings.json", "compare_settings.json is not valid JSON",
     [*COMPARE, "--out", "c-settings"]),
    ("compare: compare_settings.json a list", "compare_settings.json does not hold a JSON object",
     [*COMPARE, "--out", "c-settings-list"]),
    ("compare: corrupt run.json", "run.json is not valid JSON", [*COMPARE, "--out", "c-runjson"]),
    ("compare: run.json a list", "run.json does not hold a JSON object",
     [*COMPARE, "--out", "c-runjson-list"]),
    ("compare: unfinished run with a broken checkpoint", "state.json holds no 'rng'",
     [*COMPARE, "--out", "c-state"]),
    # ---- data ----
    ("train: non-UTF-8 jsonl", "bad.jsonl:2 is not UTF-8 text", _train("bad.jsonl")),
    ("probe: non-UTF-8 jsonl", "bad.jsonl:2 is not UTF-8 text",
     ["probe", "run", "--data", "bad.jsonl", "--out", "o"]),
    ("data prepare: non-UTF-8 jsonl", "bad.jsonl:2 is not UTF-8 text",
     ["data", "prepare", "bad.jsonl", "--out", "o"]),
    ("data info: non-UTF-8 jsonl", "bad.jsonl:2 is not UTF-8 text", ["data", "info", "bad.jsonl"]),
    ("train: shard header without n_tokens", "no integer 'n_tokens'", _train("tok/nontok.tok")),
    ("train: shard header n_tokens a string", "no integer 'n_tokens'", _train("tok/strtok.tok")),
    ("train: prepared folder, corrupt meta.json", "meta.json is not valid JSON", _train("p-meta")),
    ("train: prepared folder, meta.json without vocab_size", "no integer 'vocab_size'", _train("p-novocab")),
    ("train: prepared folder, tokenizer meta without kind", "no tokenizer 'kind'", _train("p-nokind")),
    ("train: prepared folder, corrupt tokenizer meta", "tlm_tokenizer.json is not valid JSON",
     _train("p-tokjson")),
    ("train: prepared folder, ids beyond its vocab", "token id 299, outside the vocab_size 256",
     _train("p-ids")),
    ("train: YAML not UTF-8", "latin1.yaml is not UTF-8 text",
     ["train", "--config", "latin1.yaml", "--out", "o"]),
    ("train: YAML train: a list", "'train' in trainlist.yaml is not a mapping",
     ["train", "--config", "trainlist.yaml", "--out", "o"]),
    ("train: YAML train: a string", "'train' in trainstr.yaml is not a mapping",
     ["train", "--config", "trainstr.yaml", "--out", "o"]),
    # ---- seeds ----
    *[
        (f"{cmd}: seed {seed}", "seed must be an integer in [0, 4294967295]", argv)
        for seed in ("-1", str(2**64), str(2**32))
        for cmd, argv in (
            ("train", [*TRAIN, "--out", "o", "--seed", seed]),
            ("compare", [*COMPARE[:-1], seed, "--out", "o"]),
            ("eval", ["eval", "run", "--tasks", "pydoc-mc", "--seed", seed, "--out", "o"]),
        )
    ],
    # ---- task names ----
    ("eval: unknown task", "unknown task 'nosuch_task'",
     ["eval", "run", "--tasks", "nosuch_task", "--out", "o"]),
    ("eval: mistyped builtin task", "did you mean pydoc-mc",
     ["eval", "run", "--tasks", "pydoc-mcc", "--out", "o"]),
    ("compare: unknown --eval-tasks", "unknown task 'nosuch_task'",
     [*COMPARE, "--out", "o", "--eval-tasks", "nosuch_task"]),
    # ---- result folders read by report and plot ----
    *[
        (f"{cmd}: {what}", needle, [cmd, folder, "--out", out, *more])
        for cmd, out, more in (("report", "o", []), ("plot", "fig.png", ["--kind", "curves"]))
        for what, needle, folder in (
            ("corrupt compare.json", "compare.json is not valid JSON", "rc-json"),
            ("compare.json a list", "compare.json does not hold a JSON object", "rc-list"),
            ("non-numeric summary.csv", "column 'val_loss_mean' holds a non-number ('abc')", "rc-summary"),
            ("metrics line a list", "metrics.jsonl:1 is not a JSON object", "rr-list"),
        )
    ],
    *[
        (f"{cmd}: provenance.json {what}", "provenance.json does not hold a JSON object",
         [cmd, folder, "--out", out])
        for cmd, out in (("report", "o"), ("plot", "fig.png"))
        for what, folder in (("a list", "plist"), ("a string", "pstr"))
    ],
    ("report: eval results.csv without its columns", "no column 'model'",
     ["report", "evalcols", "--out", "o"]),
    ("report: eval value not a number", "column 'value' holds a non-number ('high')",
     ["report", "evalnum", "--out", "o"]),
    ("report: manifest entry '.'", "entry '.' names the folder itself",
     ["report", "good", "--out", "dotman"]),
]


@pytest.mark.parametrize("needle,argv", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_1_and_changes_nothing(work, needle, argv, monkeypatch):
    monkeypatch.chdir(work)
    before = snapshot(work)
    r = runner.invoke(app, argv)
    assert r.exit_code == 1, (r.exit_code, r.output, r.exception)
    assert "Traceback" not in r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.output
    assert snapshot(work) == before, "the work folder changed"


def test_report_and_plot_read_a_one_arm_comparison(work, tmp_path, monkeypatch):
    """A comparison of one arm has no pairs: compare writes paired.csv as a bare newline (pandas' CSV of
    a table without rows or columns), which report and plot read as an empty table, not as an error."""
    one = _copy(work, "cmp", "one-arm")
    try:
        (one / "paired.csv").write_text(pd.DataFrame().to_csv(index=False))
        monkeypatch.chdir(work)
        r = runner.invoke(app, ["report", "one-arm", "--out", str(tmp_path / "rep")])
        assert r.exit_code == 0, (r.output, r.exception)
        assert "Comparison: one-arm" in (tmp_path / "rep" / "report.md").read_text()
        r = runner.invoke(app, ["plot", "one-arm", "--kind", "curves", "--out", str(tmp_path / "c.png")])
        assert r.exit_code == 0, (r.output, r.exception)
    finally:
        shutil.rmtree(one)


def test_resume_still_drops_a_torn_last_metrics_line(work, monkeypatch):
    """The checks above refuse a bad line followed by a newline; a last line cut short by a killed run
    (no newline) is still dropped, and the run resumes to its end."""
    run = _copy(work, "run", "torn")
    try:
        good = (run / "metrics.jsonl").read_bytes()
        (run / "metrics.jsonl").write_bytes(good + b'{"kind": "train", "st')
        monkeypatch.chdir(work)
        r = runner.invoke(app, _resume("torn"))
        assert r.exit_code == 0, (r.output, r.exception)
        steps = [json.loads(ln)["step"] for ln in (run / "metrics.jsonl").read_text().splitlines()]
        assert steps[: len(good.splitlines())] == [json.loads(ln)["step"] for ln in good.splitlines()]
        assert steps[-1] == 2 and json.loads((run / "run.json").read_text())["step"] == 2
    finally:
        shutil.rmtree(run)
