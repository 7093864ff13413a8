"""A forged manifest cannot turn --overwrite into deletion (issue 36): a received folder whose manifest says
`kind: probe` and lists a checkpoint's files is refused before anything is touched, because a probe never
writes them; the files stay byte for byte."""

from __future__ import annotations

import hashlib
import json

import numpy as np
from models_zoo import build_model
from typer.testing import CliRunner

from cli import app


def _hashes(folder):
    files = sorted(p for p in folder.iterdir() if p.is_file())
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_a_probe_manifest_listing_a_checkpoint_deletes_nothing(tmp_path):
    model = build_model("llama", tmp_path / "model")
    ids = tmp_path / "ids.npy"
    np.save(ids, np.random.default_rng(0).integers(5, 100, (4, 16)).astype(np.uint32))
    received = tmp_path / "it"
    received.mkdir()
    for name in ("model.safetensors", "config.json"):
        (received / name).write_bytes((model / name).read_bytes())
    (received / ".tlm-manifest.json").write_text(json.dumps(
        {"written_by": "tlm_probe", "kind": "probe", "command": "probe",
         "entries": ["model.safetensors", "config.json"]}))
    before = _hashes(received)
    res = CliRunner().invoke(app, ["probe", str(model), "--data", str(ids), "--out", str(received),
                                   "--overwrite"])
    assert res.exit_code == 1, res.output
    assert "never writes" in res.output and "model.safetensors" in res.output
    assert _hashes(received) == before
