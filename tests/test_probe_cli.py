"""`tlm probe`: result folder per the contract, and one-line errors (exit 1) on bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from models_zoo import build_model
from typer.testing import CliRunner

from cli import app
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.results import read_results
from tlm_probe.stats.alignment import PER_TOKEN

runner = CliRunner()
CONTRACT = ["model", "layer", "depth", "statistic", "value", "ci_low", "ci_high", "n_tokens", "d_ff", "std"]


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return build_model("gpt2", tmp_path_factory.mktemp("m") / "gpt2")


@pytest.fixture(scope="module")
def tlm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("t") / "tlm"
    torch.manual_seed(0)
    save_tlm(
        TaperedLM(TLMConfig(vocab_size=64, d_model=16, n_layers=2, n_heads=2, d_ff=(48, 16), max_seq_len=32)),
        folder,
    )
    return folder


def _fails(args, match):
    r = runner.invoke(app, ["probe", *args])
    assert r.exit_code == 1, r.output
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert match in err, err


def test_probe_writes_contract_folder(tmp_path, gpt2):
    text = tmp_path / "t.txt"
    text.write_text("Some words for the probe.\n\nAnother paragraph with more words in it.\n" * 5)
    out = tmp_path / "res"
    r = runner.invoke(
        app,
        [
            "probe",
            str(gpt2),
            "--data",
            str(text),
            "--out",
            str(out),
            "--seq-len",
            "16",
            "--max-tokens",
            "100",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["provenance"]["data"]["n_tokens"] == 100
    df, matrices, prov = read_results(out)
    assert list(df.columns[: len(CONTRACT)]) == CONTRACT and matrices is None
    assert len(df) == len(PER_TOKEN) * 3 and (df.n_tokens == 100).all()
    assert prov["architecture"]["family"] == "gpt2" and prov["backend"] == "native"
    assert len(prov["content_hash"]) == 64 and prov["versions"]["torch"] == torch.__version__
    csv, _, _ = read_results(out / "results.csv")
    assert np.allclose(csv.value, df.value)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".res.tmp")]  # no temp folder left


def test_table_output(tmp_path, tlm):
    np.save(tmp_path / "ids.npy", np.arange(200, dtype=np.uint32) % 64)
    r = runner.invoke(
        app,
        [
            "probe",
            str(tlm),
            "--data",
            str(tmp_path / "ids.npy"),
            "--out",
            str(tmp_path / "o"),
            "--seq-len",
            "16",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "align_mlp_mid" in r.stdout.replace("\n", "") or "align" in r.stdout


def test_unknown_architecture(tmp_path):
    model = tmp_path / "model"  # beside --out: an --out inside the model folder is refused first
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "rwkv"}))
    (model / "model.safetensors").write_bytes(b"")
    _fails([str(model), "--out", str(tmp_path / "o")], "unsupported architecture 'rwkv'")


def test_text_for_tokenizerless_checkpoint(tmp_path, tlm):
    _fails([str(tlm), "--out", str(tmp_path / "o")], "has no tokenizer")


def test_token_id_beyond_vocab(tmp_path, tlm):
    np.save(tmp_path / "ids.npy", np.array([1, 2, 64], dtype=np.uint32))
    _fails([str(tlm), "--data", str(tmp_path / "ids.npy"), "--out", str(tmp_path / "o")], "token id 64")


def test_empty_data(tmp_path, gpt2):
    (tmp_path / "empty.txt").write_text("")
    r = runner.invoke(
        app, ["probe", str(gpt2), "--data", str(tmp_path / "empty.txt"), "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 1 and "\n" not in r.stderr.strip()
    assert not (tmp_path / "o").exists()


def test_missing_and_corrupt_checkpoints(tmp_path, gpt2):
    _fails([str(tmp_path / "nope"), "--out", str(tmp_path / "o")], "not found")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    _fails([str(bad), "--out", str(tmp_path / "o")], "corrupt config.json")
    trunc = tmp_path / "trunc"
    trunc.mkdir()
    (trunc / "config.json").write_text((gpt2 / "config.json").read_text())
    (trunc / "model.safetensors").write_bytes((gpt2 / "model.safetensors").read_bytes()[:1000])
    _fails([str(trunc), "--out", str(tmp_path / "o")], "cannot load")


def test_pickle_only_checkpoint_is_refused(tmp_path, gpt2):
    folder = tmp_path / "pkl"
    folder.mkdir()
    (folder / "config.json").write_text((gpt2 / "config.json").read_text())
    torch.save({}, folder / "pytorch_model.bin")
    _fails([str(folder), "--out", str(tmp_path / "o")], "refusing to unpickle")


def test_bad_options(tmp_path, gpt2):
    _fails([str(gpt2), "--out", str(tmp_path / "o"), "--backend", "jax"], "unknown backend 'jax'")
    _fails([str(gpt2), "--out", str(tmp_path / "o"), "--seq-len", "100000"], "exceeds the model's maximum")
    _fails([str(gpt2), "--out", str(tmp_path / "o"), "--stats", "bogus"], "unknown statistic 'bogus'")
    _fails([str(gpt2), "--out", str(tmp_path / "o"), "--device", "tpu9"], "unknown device 'tpu9'")
