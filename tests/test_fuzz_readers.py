"""Every reader of bytes from disk, fuzzed (issue 36): malformed, truncated, deeply nested and type-confused
inputs end in a result or one UserError, never another exception, in bounded time. A fixed, derandomized
budget in CI (a few seconds a reader); TLM_FUZZ_EXAMPLES=N runs more, and whatever it finds becomes a
regression case below."""

from __future__ import annotations

import json
import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli import app
from tlm_probe.data.tokens import read_shard_header
from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import read_json_object
from tlm_probe.files.ownership import manifest_kind
from tlm_probe.models.safetensors_header import read_safetensors_header
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
    _only_user_errors(lambda: manifest_kind(folder))


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
