"""Malformed checkpoint and run folders (issue 18) through every command that loads one (tlm info, probe,
generate): one line `error: ...`, exit code 1, no traceback, the work folder unchanged. Each of these ended
in a Python traceback (TypeError, KeyError, AttributeError, an allocator error, a 2**60-byte read) before
the one loader (models/verify.py) that all commands now share. Also: the tensor shapes the loader
expects, checked against the model's own state_dict, and `tlm info RUN_FOLDER` without torch."""

from __future__ import annotations

import itertools
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_bad_input_catalogue import _run

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM

ROOT = Path(__file__).resolve().parents[1]
CFG = dict(vocab_size=256, d_model=16, n_layers=2, n_heads=2, max_seq_len=32)


def _config_edit(**changes):
    def edit(folder: Path) -> None:
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**cfg, **changes}))

    return edit


def _header_edit(change):
    """Rewrite the JSON header of model.safetensors (its tensor bytes kept)."""

    def edit(folder: Path) -> None:
        raw = (folder / "model.safetensors").read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8 : 8 + n])
        change(header)
        new = json.dumps(header).encode()
        (folder / "model.safetensors").write_bytes(len(new).to_bytes(8, "little") + new + raw[8 + n :])

    return edit


def _write(name: str, data: bytes | str):
    def edit(folder: Path) -> None:
        path = folder / name
        path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)

    return edit


def _pickle_only(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    torch.save({}, folder / "pytorch_model.bin")


def _small_vocab(folder: Path) -> None:
    """A 64-id model beside a byte-level tokenizer (256 ids)."""
    torch.manual_seed(0)
    save_tlm(TaperedLM(TLMConfig(d_ff=(48, 16), **{**CFG, "vocab_size": 64})), folder)


def _other_width(folder: Path) -> None:
    torch.manual_seed(0)
    save_tlm(TaperedLM(TLMConfig(d_ff=(32, 32), **CFG)), folder.parent / "other-width")
    shutil.copy(folder.parent / "other-width" / "model.safetensors", folder / "model.safetensors")


# folder name -> how it differs from a good checkpoint
VARIANTS = {
    "dmodel-str": _config_edit(d_model="16"),
    "nheads-list": _config_edit(n_heads=[2]),
    "dff-str": _config_edit(d_ff="abc"),
    "cms-str": _config_edit(cms_chunks="x"),
    "vocab-huge": _config_edit(vocab_size=10**10),
    "cfg-list": _write("config.json", "[1, 2]"),
    "cfg-corrupt": _write("config.json", "{not json"),
    "no-offsets": _header_edit(lambda h: h["embed.weight"].pop("data_offsets")),
    "str-offsets": _header_edit(lambda h: h["embed.weight"].update(data_offsets=["0", "4096"])),
    "trunc-header": _write("model.safetensors", b"\x30" + b"\x00" * 7 + b'{"embed.weight": {'),
    "nonjson-header": _write("model.safetensors", (20).to_bytes(8, "little") + b"x" * 20 + b"\x00" * 64),
    "width": _other_width,
    "pickle": _pickle_only,
    "tok-corrupt": _write("tlm_tokenizer.json", "{bad"),
    "tok-nokind": _write("tlm_tokenizer.json", '{"name": "x"}'),
    "tok-vocab": _small_vocab,
}
NEEDLES = {
    "dmodel-str": "config field d_model must be an integer, got '16'",
    "nheads-list": "config field n_heads must be an integer, got [2]",
    "dff-str": "config field d_ff must be a list of integers, got 'abc'",
    "cms-str": "config field cms_chunks must be a list of integers, got 'x'",
    "vocab-huge": "embed.weight has shape [256, 16], config.json implies [10000000000, 16]",
    "cfg-list": "corrupt config.json in models/cfg-list: a JSON list, not an object",
    "cfg-corrupt": "corrupt config.json in models/cfg-corrupt",
    "no-offsets": "tensor 'embed.weight' has malformed data_offsets None",
    "str-offsets": "tensor 'embed.weight' has malformed data_offsets ['0', '4096']",
    "trunc-header": "is truncated or not a safetensors file",
    "nonjson-header": "has a corrupt safetensors header",
    "width": "has shape [32, 16], config.json implies [48, 16]",
    "pickle": "has only pickle weights (pytorch_model.bin); refusing to unpickle",
    "tok-corrupt": "corrupt models/tok-corrupt/tlm_tokenizer.json",
    "tok-nokind": "tlm_tokenizer.json names no tokenizer kind",
    "tok-vocab": "its tokenizer gives token id 98, outside the model's vocabulary of 64",
}
# which commands each variant broke with a traceback before (info reads no tokenizer; some of these
# had a clean line from info and probe already and a traceback from generate only)
COMMANDS = {
    "info": lambda v: ["info", f"models/{v}"],
    "probe": lambda v: ["probe", f"models/{v}", "--data", "ids.npy", "--out", "out"],
    "generate": lambda v: ["generate", f"models/{v}", "--prompt", "ab", "--max-new-tokens", "2"],
}
BROKEN_BEFORE = {
    **{v: ("info", "probe", "generate") for v in ("dmodel-str", "nheads-list", "dff-str", "cms-str",
                                                   "cfg-list", "no-offsets", "str-offsets")},
    "vocab-huge": ("probe", "generate"),
    **{v: ("generate",) for v in ("cfg-corrupt", "trunc-header", "nonjson-header", "width", "pickle")},
    "tok-corrupt": ("probe", "generate"),
    "tok-nokind": ("probe", "generate"),
    "tok-vocab": ("generate",),  # an IndexError in the embedding
}
CASES = [(v, c) for v, cmds in BROKEN_BEFORE.items() for c in cmds]


def _gguf_with_huge_string() -> bytes:
    """A GGUF v3 header whose second metadata string declares 2**60 bytes (3 follow)."""

    def s(b: bytes) -> bytes:
        return struct.pack("<Q", len(b)) + b

    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 2)
    data += s(b"general.architecture") + struct.pack("<I", 8) + s(b"llama")
    return data + s(b"general.name") + struct.pack("<I", 8) + struct.pack("<Q", 2**60) + b"abc"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("loaders")
    torch.manual_seed(0)
    good = save_tlm(TaperedLM(TLMConfig(d_ff=(48, 16), **CFG)), root / "models" / "good")
    (good / "tlm_tokenizer.json").write_text('{"kind": "byte"}\n')
    for name, edit in VARIANTS.items():
        shutil.copytree(good, root / "models" / name)
        edit(root / "models" / name)
    import numpy as np

    np.save(root / "ids.npy", np.arange(512) % 256)
    (root / "huge-string.gguf").write_bytes(_gguf_with_huge_string())
    return root


@pytest.mark.parametrize("variant,cmd", CASES, ids=[f"{c}: {v}" for v, c in CASES])
def test_malformed_checkpoint_is_one_line(work, variant, cmd, monkeypatch):
    _run(work, COMMANDS[cmd](variant), NEEDLES[variant], monkeypatch)


@pytest.mark.parametrize("cmd", ["probe", "generate"])
def test_gguf_declaring_a_2_60_byte_string_is_one_line(work, cmd, monkeypatch):
    argv = {"probe": ["probe", "huge-string.gguf", "--data", "ids.npy", "--out", "out"],
            "generate": ["generate", "huge-string.gguf", "--prompt", "a"]}[cmd]
    _run(work, argv, "the string of 'general.name' declares 1,152,921,504,606,846,976 bytes", monkeypatch)


def test_the_good_checkpoint_still_loads(work, monkeypatch):
    """The checks refuse the variants above, not the checkpoint they were made from."""
    from typer.testing import CliRunner

    from cli import app

    monkeypatch.chdir(work)
    r = CliRunner().invoke(app, ["generate", "models/good", "--prompt", "ab", "--max-new-tokens", "2"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["info", "models/good", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["config"]["d_ff"] == [48, 16], r.output


KINDS = {
    "mixer": ("attention", "gated_attention", "titans", "hope_attention"),
    "mlp": ("swiglu", "gelu"),
    "norm": ("rmsnorm", "layernorm"),
    "positions": ("rope", "learned"),
    "tie_embeddings": (True, False),
}


@pytest.mark.parametrize("combo", list(itertools.product(*KINDS.values())), ids=str)
def test_state_shapes_are_the_models_own(combo):
    """The loader's shape table (no torch) against TaperedLM's state_dict, built on the meta device: the
    independent path. GQA (4 query, 2 kv heads), 3 CMS levels and persistent Titans tokens exercise every
    branch of the table."""
    from tlm_probe.models.shapes import state_shapes

    kinds = dict(zip(KINDS, combo, strict=True))
    cfg = TLMConfig(vocab_size=40, d_model=16, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=(48, 32, 16),
                    cms_chunks=(2, 4, 8), mem_persistent=2 if kinds["mixer"] == "titans" else 0,
                    max_seq_len=24, **kinds)
    with torch.device("meta"):
        model = TaperedLM(cfg)
    assert state_shapes(cfg) == {k: tuple(v.shape) for k, v in model.state_dict().items()}


INFO = """
import json, sys
from typer.testing import CliRunner
import cli
r = CliRunner().invoke(cli.app, ["info", sys.argv[1], "--json"])
assert r.exit_code == 0, r.output
heavy = [m for m in ("torch", "transformers", "transformer_lens", "safetensors") if m in sys.modules]
print(json.dumps({"heavy": heavy, "params": json.loads(r.stdout)["params"]}))
"""


def test_info_on_a_run_folder_imports_no_model_library(work):
    """The weights are checked from the safetensors header alone (it imported torch and transformer_lens,
    19x the start-up of `tlm --help`); the count is the parameters of the model, summed independently."""
    r = subprocess.run([sys.executable, "-c", INFO, str(work / "models" / "good")], capture_output=True,
                       text=True, cwd=ROOT, check=True)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["heavy"] == []
    torch.manual_seed(0)
    model = TaperedLM(TLMConfig(d_ff=(48, 16), **CFG))
    assert out["params"] == sum(p.numel() for p in model.parameters())


def test_info_benchmark_arm_runs(tmp_path):
    """benchmarks/bench_costs.info_folder_vs_help: one round gives a positive ratio."""
    from benchmarks import bench_costs

    (name, r), = bench_costs.info_folder_vs_help(tmp_path, rounds=1).items()
    assert name == "tlm info RUN_FOLDER / tlm --help" and r["median"] > 0 and r["rounds"] == 1


def test_train_that_cannot_fit_in_memory_is_refused_before_writing(work, monkeypatch):
    """vocab_size 2**24 (the largest in range, as a huge tokenizer.json gives) at width 4096: 69e9
    parameters need at least 16 bytes each, more than any machine this runs on. Before: an allocator
    traceback after train_config.json, data.json and the manifest were written."""
    from tiny_flags import TINY

    (work / "bigv.yaml").write_text("vocab_size: 16777216\n")
    _run(work, ["train", "--config", "bigv.yaml", "--data", "ids.npy", "--out", "bigv", *TINY,
                "--d-model", "4096"], "parameters at vocab_size 16,777,216", monkeypatch)
