"""Issue 36, the readers that went around the bounded ones, and `--overwrite` that deletes only tlm's bytes.

1. state.json, compare.json, an eval run's provenance, --device-map FILE, a schedule --out, TLMConfig.load
   and metrics.jsonl go through files/jsonfile.py: a file nested 100,000 deep was a RecursionError (or a
   JSONDecodeError) traceback; now it is one UserError naming the file and the limit.
2. `tlm train --config` reads YAML with the shared bounded reader (files/yamlfile.py) that task configs use.
3. Every received table is size-checked before pandas reads it (files/tablefile.py).
4. The manifest records each written file's sha256; a file whose bytes no longer hash to it (or, in a
   probe's folder, that has no hash) is neither replaced nor deleted, and nothing is touched.
The modules under test are imported inside each test, so that each fails on its own on the code before."""

from __future__ import annotations

import hashlib
import json
import signal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from cli import app
from tlm_probe.errors import UserError

DEEP = b'{"tokens": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
"""JSON nested 100,000 deep: json.loads overflows Python's stack (RecursionError) on it."""
TABLE = pd.DataFrame({"model": ["m"], "layer": [0], "depth": [0.0], "statistic": ["s"], "value": [0.5],
                      "ci_low": [0.4], "ci_high": [0.6], "n_tokens": [10], "d_ff": [64]})
runner = CliRunner()


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _deep_refused(fn, *needles: str) -> str:
    with pytest.raises(UserError) as e:
        fn()
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))
    return str(e.value)


def _one_error_line(res) -> str:
    lines = res.output.strip().splitlines()
    assert res.exit_code == 1, (res.exit_code, res.output, res.exception)
    assert "Traceback" not in res.output and len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


# ---- 1. the JSON readers that went around read_json ----------------------------------------------------
def test_a_deep_checkpoint_state_json_is_one_error(tmp_path):
    from tlm_probe.probe.checkpoints import _tokens

    step = tmp_path / "state" / "step_0000010"
    _write(step / "state.json", DEEP)
    _deep_refused(lambda: _tokens(step), "state.json", "nests", "64")
    _write(step / "state.json", b'{"step": 10, "tokens": 640}')
    assert _tokens(step) == 640
    assert _tokens(tmp_path / "elsewhere") is None  # no state.json: no count


def test_a_corrupt_compare_json_is_one_error(tmp_path):
    from tlm_probe.plotting.inputs import advantage_curves

    _write(tmp_path / "cmp" / "compare.json", b'{"baseline": "uniform", ')  # cut short
    _deep_refused(lambda: advantage_curves(tmp_path / "cmp"), "compare.json", "not valid JSON")
    _write(tmp_path / "cmp" / "compare.json", DEEP)
    _deep_refused(lambda: advantage_curves(tmp_path / "cmp"), "compare.json", "nests")


def test_a_deep_eval_provenance_or_a_bad_kept_table_is_one_error(tmp_path):
    from tlm_probe.eval.columns import FOLDER, _jsonable, eval_hook
    from tlm_probe.eval.run import EvalOptions, resolved_device

    opts = EvalOptions(tasks=[], limit=2)
    run = tmp_path / "run"
    _write(run / FOLDER / "provenance.json", DEEP)
    _deep_refused(lambda: eval_hook(opts)(run), "provenance.json", "nests")
    prov = {"options": _jsonable(resolved_device(opts))}  # the same options: the kept table is reused
    _write(run / FOLDER / "provenance.json", json.dumps(prov).encode())
    _write(run / FOLDER / "results.csv", b"model,task,metric\nm,t,acc\n")  # no value column
    _deep_refused(lambda: eval_hook(opts)(run), "results.csv", "'value'")
    _write(run / FOLDER / "results.csv", b"model,task,metric,value\nm,t,acc,0.25\n")
    assert eval_hook(opts)(run) == {"t:acc": 0.25}


def test_a_deep_device_map_file_is_one_error(tmp_path):
    from tlm_probe.capture.dispatch import parse_device_map

    path = _write(tmp_path / "map.json", DEEP)
    _deep_refused(lambda: parse_device_map(str(path)), "--device-map", "map.json", "nests")
    ok = _write(tmp_path / "ok.json", b'{"model.embed": "cpu"}')
    assert parse_device_map(str(ok)) == {"model.embed": "cpu"}


def test_a_deep_file_at_the_schedule_out_is_not_a_schedule_file(tmp_path):
    from tlm_probe.commands.schedule_from_probe import check_schedule_out

    out = _write(tmp_path / "s.json", DEEP)
    _deep_refused(lambda: check_schedule_out(out), "is not a schedule file")
    assert out.read_bytes() == DEEP


def test_a_deep_model_config_is_one_error(tmp_path):
    from tlm_probe.models.config import TLMConfig

    _deep_refused(lambda: TLMConfig.load(_write(tmp_path / "config.json", DEEP)), "config.json", "nests")


def test_metrics_jsonl_is_bounded_in_depth_and_size(tmp_path, monkeypatch):
    from tlm_probe import results

    path = _write(tmp_path / "run" / "metrics.jsonl", b'{"step": 1}\n' + DEEP + b"\n")
    _deep_refused(lambda: results.read_metrics(tmp_path / "run"), "metrics.jsonl:2", "nests", "64")
    _write(path, b'{"step": 1, "loss": 2.5}\n' * 100)
    assert len(results.read_metrics(tmp_path / "run")) == 100
    monkeypatch.setattr(results, "METRICS_MAX_BYTES", 1000)  # 2,500 bytes: refused before a byte is read
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("read without its size checked"))
    _deep_refused(lambda: results.read_metrics(tmp_path / "run"), "metrics.jsonl", "2,500 bytes", "1,000")


# ---- 2. tlm train --config: the shared bounded YAML reader ---------------------------------------------
def _alias_bomb() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


TRAIN_CONFIGS = {
    "nested 50,000 deep": ("deep.yaml", "steps: 1\nx: " + "[" * 50_000 + "]" * 50_000, ("nests", "64")),
    "alias bomb": ("bomb.yaml", _alias_bomb(), ("alias", "100,000")),
    "recursive alias": ("loop.yaml", "steps: 1\nx: &a [1, *a]\n", ("alias",)),
    "2 MiB": ("huge.yaml", "steps: 1\nx: " + "y" * (2 * 2**20) + "\n", ("bytes", "1,048,576")),
    "TOML nested deep": ("deep.toml", "x = " + "[" * 50_000 + "]" * 50_000, ("nests",)),
}


@pytest.mark.parametrize("case", list(TRAIN_CONFIGS))
def test_a_hostile_train_config_is_one_line(tmp_path, case):
    """Before: the deep YAML and TOML were RecursionError tracebacks, the recursive alias a
    ConstructorError-free self-referencing list, the 2 MiB file read whole."""
    name, text, needles = TRAIN_CONFIGS[case]
    config = tmp_path / name
    config.write_text(text)
    line = _one_error_line(runner.invoke(app, ["train", "--config", str(config), "--out",
                                                str(tmp_path / "run")]))
    assert name in line and all(n in line for n in needles), line
    assert not (tmp_path / "run").exists()


def test_a_nul_byte_in_a_task_config_is_one_error(tmp_path):
    """Found by the fuzzer: PyYAML checks the characters when the loader is made, which the task-config
    guard did outside its try (a ReaderError traceback)."""
    from tlm_probe.eval.task_code import check_task_code

    path = tmp_path / "nul.yaml"
    path.write_bytes(b"task: x\x00\n")
    _deep_refused(lambda: check_task_code([str(path)], trust=False), "nul.yaml", "not valid YAML", "#x0000")


def test_one_yaml_reader_for_task_configs_and_train_configs():
    """The bounds are declared once: task_code uses the shared reader, not a copy of its own."""
    from tlm_probe.eval import task_code
    from tlm_probe.files import yamlfile

    assert task_code.compose_file is yamlfile.compose_file
    assert not hasattr(task_code, "_loader_class") and not hasattr(task_code, "_check_expansion")


# ---- 3. tables: the size checked before pandas reads ---------------------------------------------------
def _no_pandas(monkeypatch):
    for name in ("read_csv", "read_parquet"):
        monkeypatch.setattr(pd, name, lambda *a, **k: pytest.fail("pandas read a table before its size was "
                                                                   "checked"))


def test_every_received_table_is_size_checked_before_reading(tmp_path, monkeypatch):
    from tlm_probe.eval.columns import _cached_table
    from tlm_probe.files import tablefile
    from tlm_probe.plotting.inputs import read_table
    from tlm_probe.results import read_results
    from tlm_probe.workflows.compare_figures import write_sweep

    big = b"model,layer,statistic,value\n" + b"m,0,s,0.5\n" * 200  # 2,028 bytes
    for name in ("probe/results.csv", "paired.csv", "eval/results.csv", "cmp/summary.csv"):
        _write(tmp_path / name, big)
    monkeypatch.setattr(tablefile, "TABLE_MAX_BYTES", 1000)
    _no_pandas(monkeypatch)
    readers = {"read_results": lambda: read_results(tmp_path / "probe"),
               "plotting": lambda: read_table(tmp_path / "cmp" / "summary.csv", ("model", "statistic")),
               "eval columns": lambda: _cached_table(tmp_path / "eval" / "results.csv"),
               "sweep": lambda: write_sweep(tmp_path)}
    for what, read in readers.items():
        line = _deep_refused(read, "2,028 bytes", "1,000")
        assert "csv" in line, (what, line)


def test_a_parquet_footer_declaring_too_many_cells_is_refused_before_reading(tmp_path, monkeypatch):
    """A column of nulls is a few bytes on disk and 8 bytes a row in memory: the footer's count decides."""
    from tlm_probe.files import tablefile
    from tlm_probe.results import read_results

    folder = tmp_path / "p"
    folder.mkdir()
    rows = pd.concat([TABLE] * 50).assign(statistic=[f"s{i}" for i in range(50)])  # one row per key
    rows.to_parquet(folder / "results.parquet")  # 50 rows x 9 columns
    assert len(read_results(folder)[0]) == 50
    monkeypatch.setattr(tablefile, "MAX_CELLS", 300)
    _no_pandas(monkeypatch)
    _deep_refused(lambda: read_results(folder), "results.parquet", "50 rows", "300 cells")


def test_a_pipe_named_results_csv_is_refused_not_waited_on(tmp_path):
    """`tlm plot` of an eval folder whose results.csv is a pipe: before, pandas waited for a writer."""
    import os

    from tlm_probe.plotting.inputs import load_eval

    folder = tmp_path / "ev"
    folder.mkdir()
    os.mkfifo(folder / "results.csv")
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("pandas waited on a pipe for a writer"))
    signal.alarm(20)
    try:
        _deep_refused(lambda: load_eval(folder), "results.csv", "not a regular file")
    finally:
        signal.alarm(0)


# ---- 4. --overwrite deletes only the bytes tlm wrote -----------------------------------------------------
def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): _sha(p) if p.is_file() else "dir" for p in sorted(root.rglob("*"))}


def _forged(folder: Path, sha: str | None) -> Path:
    """A received folder: someone's own results.csv and provenance.json under the names a probe writes,
    and a manifest (kind probe) that claims them, with the digest `sha` (None: no digests)."""
    _write(folder / "results.csv", b"model,layer,statistic,value\nmy-model,0,my_stat,0.123\n")
    _write(folder / "provenance.json", b'{"model": "three weeks of my GPU time"}\n')
    doc = {"written_by": "tlm_probe", "kind": "probe", "command": "probe",
           "entries": ["results.csv", "provenance.json"]}
    if sha is not None:
        doc["sha256"] = {"results.csv": sha, "provenance.json": _sha(folder / "provenance.json")}
    _write(folder / ".tlm-manifest.json", json.dumps(doc).encode())
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from models_zoo import build_model

    root = tmp_path_factory.mktemp("tiny")
    model = build_model("llama", root / "model")
    np.save(root / "ids.npy", np.random.default_rng(0).integers(5, 100, (4, 16)).astype(np.uint32))
    return model, root / "ids.npy"


@pytest.mark.parametrize("sha", ["0" * 64, None], ids=["wrong hash", "no hash"])
def test_a_forged_manifest_naming_a_users_results_csv_keeps_it_byte_for_byte(tiny, tmp_path, sha):
    model, ids = tiny
    received = _forged(tmp_path / "it", sha)
    before = _snapshot(received)
    res = runner.invoke(app, ["probe", str(model), "--data", str(ids), "--out", str(received), "--overwrite"])
    line = _one_error_line(res)
    assert "results.csv" in line and ("not the ones tlm wrote" if sha else "no content hash") in line, line
    assert _snapshot(received) == before


def test_tlm_records_the_sha256_of_what_it_wrote_and_replaces_it_again(tiny, tmp_path):
    """The own flow still works: the digest is that of the bytes on disk (computed here independently), and
    a second probe into the folder replaces them; after the user edits one, nothing is replaced."""
    model, ids = tiny
    out = tmp_path / "probe"
    argv = ["probe", str(model), "--data", str(ids), "--out", str(out)]
    assert runner.invoke(app, argv).exit_code == 0
    doc = json.loads((out / ".tlm-manifest.json").read_text())
    files = [e for e in doc["entries"] if (out / e).is_file()]
    assert "results.csv" in files and doc["sha256"] == {e: _sha(out / e) for e in files}
    assert runner.invoke(app, [*argv, "--overwrite"]).exit_code == 0
    with (out / "results.csv").open("a") as f:
        f.write("my,own,added,row\n")
    before = _snapshot(out)
    line = _one_error_line(runner.invoke(app, [*argv, "--overwrite"]))
    assert "results.csv" in line and "not the ones tlm wrote" in line
    assert _snapshot(out) == before


def test_remove_owned_checks_every_file_before_deleting_any(tmp_path):
    from tlm_probe.files import fileio
    from tlm_probe.results import write_results

    out = write_results(tmp_path / "r", TABLE, None, {"model": "m"})
    (out / "results.csv").write_text("the user's table now\n")  # results.parquet and provenance are tlm's
    before = _snapshot(out)
    _deep_refused(lambda: fileio.remove_owned(out), "results.csv", "not the ones tlm wrote")
    assert _snapshot(out) == before


def test_a_publish_killed_halfway_leaves_a_folder_tlm_can_replace(tmp_path, monkeypatch):
    """While new files go in, the manifest accepts each file's old or new bytes: a kill between two
    renames leaves no file that a later run would refuse as not tlm's."""
    from tlm_probe.files import fileio
    from tlm_probe.results import write_results

    out = write_results(tmp_path / "r", TABLE, None, {"model": "m"})
    real, calls = fileio.replace_entry, []

    def killed_after_one(src, dst):
        if calls:
            raise KeyboardInterrupt
        calls.append(dst)
        real(src, dst)

    monkeypatch.setattr(fileio, "replace_entry", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        write_results(out, TABLE.assign(value=0.9), None, {"model": "m2"})
    monkeypatch.setattr(fileio, "replace_entry", real)
    fileio.check_unchanged(out, fileio.read_manifest(out))  # every file is tlm's, old or new
    write_results(out, TABLE.assign(value=0.7), None, {"model": "m3"})
    assert pd.read_csv(out / "results.csv")["value"].tolist() == [0.7]


def test_the_kinds_that_publish_are_the_kinds_hashed():
    """HASHED_KINDS (a file without a digest is refused there) names every kind written through publish."""
    import re

    from tlm_probe.files.ownership import HASHED_KINDS

    root = Path(__file__).resolve().parents[1] / "tlm_probe"
    calls = re.compile(r'publish\(tmp, out, "([^"]+)"\)')
    kinds = {m for p in root.rglob("*.py") for m in calls.findall(p.read_text())}
    assert kinds and kinds | {"probe", "eval"} == set(HASHED_KINDS)  # results.write_results: probe, eval
