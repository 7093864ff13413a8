"""Every reader of bytes from disk, fuzzed (issue 36): malformed, truncated, deeply nested and type-confused
inputs end in a result or one UserError, never another exception, in bounded time. A fixed, derandomized
budget in CI (a few seconds a reader); TLM_FUZZ_EXAMPLES=N runs more, and whatever it finds becomes a
regression case below."""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import struct
import subprocess
import sys

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli import app
from tlm_probe.capture.dispatch import parse_device_map, parse_max_memory
from tlm_probe.data.sources import iter_documents
from tlm_probe.data.tokens import read_shard_header
from tlm_probe.errors import UserError
from tlm_probe.files.fileio import read_manifest
from tlm_probe.files.jsonfile import read_json_object
from tlm_probe.files.ownership import check_unchanged, manifest_kind
from tlm_probe.files.yamlfile import compose_file, load_file
from tlm_probe.models.safetensors_header import read_safetensors_header
from tlm_probe.plotting.diff import cka_grid
from tlm_probe.plotting.inputs import load_diff, load_trust
from tlm_probe.plotting.trust import flagged_cells, trust_grid
from tlm_probe.report.diff_section import headline, per_layer_table
from tlm_probe.report.trust_section import verdict
from tlm_probe.results import metrics_lines, read_results
from tlm_probe.schedules.widths import ScheduleError, read_schedule_file

EXAMPLES = int(os.environ.get("TLM_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=2000, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20)


def _mutations(doc: bytes) -> st.SearchStrategy[bytes]:
    """A valid document cut short, with bytes flipped, or replaced by arbitrary bytes or JSON."""
    return st.one_of(
        st.integers(0, len(doc)).map(lambda n: doc[:n]),
        st.tuples(st.integers(0, max(len(doc) - 1, 0)), st.integers(0, 255)).map(
            lambda t: doc[:t[0]] + bytes([t[1]]) + doc[t[0] + 1:]),
        st.binary(max_size=300),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.integers(1, 5000).map(lambda k: b"[" * k + b"]" * k),
    )


def _safetensors(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + body


GOOD_HEADER = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                          "__metadata__": {"format": "pt"}}).encode()


def _only_user_errors(fn, *errors):
    try:
        fn()
    except (UserError, *errors):
        pass


@FUZZ
@given(data=_mutations(json.dumps({"step": 3, "tokens": 12, "nested": {"a": [1, 2]}}).encode()))
def test_json_object_reader(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("j") / "x.json"
    path.write_bytes(data)
    _only_user_errors(lambda: read_json_object(path))


@FUZZ
@given(header=_mutations(GOOD_HEADER), body=st.binary(max_size=16))
def test_safetensors_header_reader(tmp_path_factory, header, body):
    path = tmp_path_factory.mktemp("s") / "model.safetensors"
    path.write_bytes(_safetensors(header, body))
    _only_user_errors(lambda: read_safetensors_header(path))


@FUZZ
@given(data=_mutations(b"TLMTOK01" + json.dumps({"dtype": "uint32", "vocab_size": 9, "n_tokens": 2,
                                                 "tokenizer_hash": "x", "n_bytes": 2}).encode().ljust(248)
                       + struct.pack("<2I", 1, 2)))
def test_token_shard_header_reader(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("t") / "shard_00000.tok"
    path.write_bytes(data)
    _only_user_errors(lambda: read_shard_header(path))


@FUZZ
@given(data=_mutations(json.dumps({"format": "tlm-schedule", "version": 1, "n_layers": 2, "d_ff": 64,
                                   "multiple_of": 32, "widths": [96, 32], "source": {}}).encode()))
def test_schedule_file_reader(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("sch") / "s.json"
    path.write_bytes(data)
    _only_user_errors(lambda: read_schedule_file(path), ScheduleError)


@FUZZ
@given(data=_mutations(json.dumps({"written_by": "tlm_probe", "kind": "probe", "command": "probe",
                                   "entries": ["results.csv"]}).encode()))
def test_manifest_reader(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("m")
    (folder / ".tlm-manifest.json").write_bytes(data)
    (folder / "results.csv").write_text("a user's table\n")
    _only_user_errors(lambda: manifest_kind(folder))
    _only_user_errors(lambda: check_unchanged(folder, read_manifest(folder)))  # the content hashes too


# ---- the YAML, table and metrics.jsonl readers (files/yamlfile.py, files/tablefile.py, results.py) ------
GOOD_YAML = (b"steps: 3\nlr: 0.001\nschedule: cosine:1.5:0.5\nitems: [1, 2, {a: b}]\nanchor: &x [1, 2]\n"
             b"again: *x\nblock:\n  - one\n  - two: 2\n")
YAML_ODDITIES = [b"x: !!python/object/apply:os.system [echo]\n", b"x: &a [1, *a]\n", b"*nowhere\n",
                 b"--- a\n--- b\n", b"x: !!binary ===\n", b"? [a, b]\n: c\n", b"x: !custom 3\n", b"\t- tab\n",
                 b"x: 1\nx: 2\n", b"<<: *a\n", b"a: &a {b: 1}\n<<: *a\n", b"%YAML 9.9\n--- x\n"]


def _alias_bomb(levels: int, fanout: int) -> bytes:
    lines = ["l0: &l0 [" + ",".join(["x"] * fanout) + "]"]
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * fanout) + "]" for i in range(1, levels)]
    return ("\n".join(lines) + "\n").encode()


def _block_nesting(depth: int) -> bytes:
    return "".join(f"{' ' * i}k{i}:\n" for i in range(depth)).encode() + b" " * depth + b"end\n"


yaml_documents = st.one_of(
    _mutations(GOOD_YAML),
    json_values.map(lambda v: json.dumps(v).encode()),  # JSON is YAML
    st.sampled_from(YAML_ODDITIES),
    st.tuples(st.integers(1, 12), st.integers(1, 12)).map(lambda t: _alias_bomb(*t)),
    st.integers(1, 300).map(_block_nesting),
)


@FUZZ
@given(data=yaml_documents)
def test_yaml_reader(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("y") / "config.yaml"
    path.write_bytes(data)
    _only_user_errors(lambda: load_file(path))
    _only_user_errors(lambda: compose_file(path))


TABLE = pd.DataFrame({"model": ["m", "m"], "layer": [0, 1], "depth": [0.0, 1.0], "statistic": ["s", "s"],
                      "value": [0.5, 0.25], "ci_low": [0.4, 0.2], "ci_high": [0.6, 0.3], "n_tokens": [10, 10],
                      "d_ff": [64, 32]})


def _parquet_bytes() -> bytes:
    buffer = io.BytesIO()
    TABLE.to_parquet(buffer, index=False)
    return buffer.getvalue()


@FUZZ
@given(suffix=st.sampled_from([".csv", ".parquet"]), data=st.data())
def test_table_reader(tmp_path_factory, suffix, data):
    good = TABLE.to_csv(index=False).encode() if suffix == ".csv" else _parquet_bytes()
    path = tmp_path_factory.mktemp("tb") / f"results{suffix}"
    path.write_bytes(data.draw(_mutations(good)))
    _only_user_errors(lambda: read_results(path))


metrics_files = st.one_of(
    _mutations(b'{"step": 1, "loss": 2.5}\n{"step": 2, "loss": 2.25, "val": {"a": [1]}}\n'),
    st.lists(json_values.map(lambda v: json.dumps({"step": 1, "x": v})), max_size=5).map(
        lambda lines: "\n".join(lines).encode()),
)


@FUZZ
@given(data=metrics_files)
def test_metrics_jsonl_reader(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("mj") / "metrics.jsonl"
    path.write_bytes(data)
    _only_user_errors(lambda: metrics_lines(path))


corpus_files = st.one_of(
    _mutations(b'{"text": "a b c"}\n{"text": "d", "id": [1, {"x": null}]}\n'),
    st.lists(json_values.map(lambda v: json.dumps({"text": v})), max_size=5).map(
        lambda lines: "\n".join(lines).encode()),
    st.integers(1, 5000).map(lambda k: b'{"text": "x"}\n{"text": ' + b"[" * k + b"]" * k + b"}\n"),
    st.integers(4000, 6000).map(lambda k: b'{"text": "x", "n": ' + b"7" * k + b"}\n"),  # int digit limit
)


@FUZZ
@given(data=corpus_files)
def test_jsonl_corpus_reader(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("cj") / "corpus.jsonl"
    path.write_bytes(data)
    _only_user_errors(lambda: list(iter_documents(str(path))))
    _only_user_errors(lambda: list(iter_documents(f"{path}:id")))


# the hostile inputs of these readers, in a child under a memory cap and a time limit: what the bounds are for
HOSTILE_READS = {
    "alias bomb (387 million nodes)": ("config.yaml", "load_file", _alias_bomb(9, 9)),
    "YAML nested 50,000 deep": ("deep.yaml", "load_file", b"x: " + b"[" * 50_000 + b"]" * 50_000),
    "metrics line nested 100,000 deep": ("metrics.jsonl", "metrics_lines",
                                         b'{"step": 1}\n' + b"[" * 100_000 + b"]" * 100_000 + b"\n"),
    "corpus line nested 100,000 deep": ("corpus.jsonl", "documents",
                                        b'{"text": "a"}\n{"text": ' + b"[" * 100_000 + b"]" * 100_000
                                        + b"}\n"),
    "corpus line of 64 MiB + 12 bytes": ("corpus.jsonl", "documents",
                                         b'{"text": "' + b"a" * (64 * 2**20) + b'"}\n'),
}
CHILD = """
import sys
from pathlib import Path
from tlm_probe.errors import UserError
from tlm_probe.files.yamlfile import load_file
from tlm_probe.results import metrics_lines
from tlm_probe.capture.dispatch import parse_device_map, parse_max_memory
from tlm_probe.data.sources import iter_documents
documents = lambda path: list(iter_documents(str(path)))
try:
    {fn}(Path(sys.argv[1]))
except UserError as e:
    print("error:", e)
    sys.exit(1)
"""


@pytest.mark.parametrize("case", list(HOSTILE_READS))
def test_hostile_reads_end_in_one_line_within_memory_and_time(tmp_path, case):
    name, fn, data = HOSTILE_READS[case]
    path = tmp_path / name
    path.write_bytes(data)
    cap = 2 * 2**30
    p = subprocess.run([sys.executable, "-c", CHILD.format(fn=fn), str(path)], capture_output=True, text=True,
                       timeout=60, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
    assert p.returncode == 1 and p.stdout.startswith("error: ") and "Traceback" not in p.stderr, (p.stdout,
                                                                                                   p.stderr)


# ---- regression cases from issue 36, through the CLI as a user meets them -------------------------------
@pytest.mark.parametrize("header", [
    json.dumps({"__metadata__": ["not", "a", "map"]}).encode(),  # passed `tlm info`, broke generate
    b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # RecursionError in the header reader
])
def test_bad_safetensors_headers_are_one_error_line(tmp_path, header):
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "tlm", "vocab_size": 8, "d_model": 4,
                                                    "n_layers": 1, "n_heads": 1, "d_ff": [4]}))
    (folder / "model.safetensors").write_bytes(_safetensors(header))
    for args in (["info", str(folder)], ["generate", str(folder), "--prompt", "x", "--max-new-tokens", "1"]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 1, (args, res.output)
        assert "error:" in res.output and "Traceback" not in res.output


def test_a_deeply_nested_config_is_one_error_line(tmp_path):
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "config.json").write_bytes(b'{"model_type": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    res = CliRunner().invoke(app, ["info", str(folder)])
    assert res.exit_code == 1 and "nests" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize(("line", "says"), [
    (b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     "corpus.jsonl:2 nests 100001 levels deep (the limit is 64)"),
    (b'{"text": "x", "n": ' + b"7" * 5000 + b"}", "corpus.jsonl:2 holds a number tlm does not read"),
])
def test_a_hostile_corpus_line_is_one_error_line(tmp_path, line, says):
    """issue 36: a JSONL corpus line was parsed by json.loads itself (a RecursionError / ValueError
    traceback); now one line naming the file, the line and the limit, before anything is written."""
    (tmp_path / "corpus.jsonl").write_bytes(b'{"text": "a b c"}\n' + line + b"\n")
    res = CliRunner().invoke(app, ["data", "prepare", str(tmp_path / "corpus.jsonl"),
                                   "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and says in res.output, res.output
    assert res.output.count("error:") == 1 and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()


# ---- issue 49: the diff and trust folder readers, and the device-map parser ------------------------------
RESULTS = os.path.join(os.path.dirname(__file__), "..", "analyses", "results")
DIFF_FOLDER = os.path.join(RESULTS, "confirm", "diff", "cosine_1.5_0.5-s0-vs-uniform-s0")
TRUST_FOLDER = os.path.join(RESULTS, "trust", "SmolLM2-135M-Q4_1-task16")


def _field_edits(path: str) -> st.SearchStrategy[bytes]:
    """The valid JSON object in `path` with one top-level field replaced by any JSON value (NaN included),
    or the whole file mutated."""
    doc = json.loads(open(path, "rb").read())
    return st.one_of(
        st.tuples(st.sampled_from(sorted(doc)), json_values).map(
            lambda kv: json.dumps({**doc, kv[0]: kv[1]}).encode()),
        _mutations(json.dumps(doc).encode()),
    )


def _folder_with(tmp_path_factory, src: str, name: str, data: bytes):
    folder = tmp_path_factory.mktemp("f") / "in"
    shutil.copytree(src, folder)
    (folder / name).write_bytes(data)
    return folder


def _drawn_diff(folder) -> None:
    """What passes the reader goes through the report's tables and the CKA grid without an exception."""

    s, t = load_diff(folder)
    headline(s), per_layer_table(s), cka_grid(t["cka.csv"])


@FUZZ
@given(name_data=st.one_of(
    _field_edits(os.path.join(DIFF_FOLDER, "diff.json")).map(lambda d: ("diff.json", d)),
    *[_mutations(open(os.path.join(DIFF_FOLDER, n), "rb").read()).map(lambda d, n=n: (n, d))
      for n in ("cka.csv", "layers.csv", "tokens.csv")]))
def test_diff_folder_reader(tmp_path_factory, name_data):
    folder = _folder_with(tmp_path_factory, DIFF_FOLDER, *name_data)
    _only_user_errors(lambda: _drawn_diff(folder))


def _drawn_trust(folder) -> None:

    s, table = load_trust(folder)
    trust_grid(table), flagged_cells(table, s), verdict(table)


@FUZZ
@given(name_data=st.one_of(
    _field_edits(os.path.join(TRUST_FOLDER, "trust.json")).map(lambda d: ("trust.json", d)),
    _mutations(open(os.path.join(TRUST_FOLDER, "trust.csv"), "rb").read()).map(lambda d: ("trust.csv", d))))
def test_trust_folder_reader(tmp_path_factory, name_data):
    folder = _folder_with(tmp_path_factory, TRUST_FOLDER, *name_data)
    _only_user_errors(lambda: _drawn_trust(folder))


@FUZZ
@given(data=st.one_of(_mutations(json.dumps({"embed": 0, "blocks.0": "cpu", "unembed": "disk"}).encode()),
                      json_values.map(lambda v: json.dumps({"blocks": v}).encode())),
       memory=st.text(max_size=30))
def test_device_map_and_max_memory_parsers(tmp_path_factory, data, memory):

    path = tmp_path_factory.mktemp("dm") / "map.json"
    path.write_bytes(data)
    _only_user_errors(lambda: parse_device_map(str(path)))
    _only_user_errors(lambda: parse_max_memory(memory))
