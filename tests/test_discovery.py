"""Discovery of an architecture the table lacks: families taken out of the table (monkeypatched) must be
found from their module trees, proved, and probed to the same numbers as test_families' independent float64
reference; models whose inferred row is wrong (a residual multiplier, an in-place add, a residual added
inside the MLP, a mixture of experts) must be refused naming the invariant that failed and by how much.

Tolerance of the statistics: 1e-5, as test_families (float32 pieces through 3 layers of width 32, measured
below 1e-6). The proofs' own tolerance is in capture/verify.py (16 float eps x the terms' magnitude).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from families_zoo import build_family
from models_zoo import CORPUS, build_model
from test_families import PAR, SEQ, SEQ_LEN, _reference_values
from typer.testing import CliRunner

from cli import app
from tlm_probe.api.library import probe
from tlm_probe.capture import adapters, load_probe_model
from tlm_probe.capture.discovery import DiscoveryError
from tlm_probe.errors import UserError

runner = CliRunner()
TOL = 1e-5

# variant -> (builder, the reference's layout: block kind and the modules it zeroes, from the modeling files)
FOUND = {
    "qwen2": (build_model, SEQ),
    "gpt2": (build_model, ("sequential", {"mlp": "mlp"})),
    "gemma2": (build_family, SEQ),  # sandwich norms: the post-feedforward norm's output is the piece
    "phi": (build_family, PAR),  # parallel block, fc1/fc2 MLP, final_layernorm
}
# variant -> what must be named in the refusal
REFUSED = {
    "granite": "invariant mlp_out = resid_post - resid_mid fails at layer 0 by",  # residual_multiplier 0.5
    "falcon_parallel": "invariant mlp_out = block output with attn_out zeroed - resid_pre fails",  # in place
    "bloom": "invariant mlp_out = down_proj(mlp_post) fails",  # BloomMLP adds the residual itself
    "mixtral": "invariant mlp_out = down_proj(mlp_post) fails",  # experts: no one down projection
}


def _model_type(folder) -> str:
    return json.loads((folder / "config.json").read_text())["model_type"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root, cache = tmp_path_factory.mktemp("discovery"), {}

    def get(variant: str):
        if variant not in cache:
            builder = FOUND[variant][0] if variant in FOUND else build_family
            cache[variant] = builder(variant, root / variant)
        return cache[variant]

    return get


@pytest.fixture
def unknown(monkeypatch):
    """Take a model type out of the table for one test and turn discovery on; returns the removed row."""
    monkeypatch.setattr(adapters, "DISCOVERY", {"enabled": True})
    monkeypatch.setattr(adapters, "_USER", {})

    def remove(model_type: str):
        table = dict(adapters._BY_TYPE)
        row = table.pop(model_type)
        monkeypatch.setattr(adapters, "_BY_TYPE", table)
        return row

    return remove


@pytest.mark.parametrize("variant", list(FOUND))
def test_a_family_out_of_the_table_is_discovered_proved_and_measured_right(folders, unknown, variant, capsys):
    folder = folders(variant)
    table_row = unknown(_model_type(folder))
    pm = load_probe_model(folder)
    line = capsys.readouterr().err
    assert "using an inferred one" in line and "proved by the invariants" in line, line
    assert pm.describe()["source"] == "discovered"
    # the inferred row is the one written by hand for the table
    assert pm.taps() == dict(table_row.taps[pm.block_kind])
    assert (pm.adapter.layers, pm.adapter.mlp_down) == (table_row.layers, table_row.mlp_down)
    assert pm.adapter.final_norm == table_row.final_norm and pm.lens_refusal is None
    model = type(pm.model).from_pretrained(folder, dtype=torch.float64).eval()
    ref: dict = {}
    layers = model.base_model.get_submodule(pm.adapter.layers)
    _reference_values(variant, model, pm, layers, ref, layout=FOUND[variant][1], texts=CORPUS)
    backends = ("native", "nnsight", "transformer-lens") if variant == "qwen2" else ("native", "nnsight")
    for backend in backends:
        df = probe(load_probe_model(folder), CORPUS, backend=backend, seq_len=SEQ_LEN, max_tokens=None)
        worst = max(
            abs(r.value - np.concatenate(ref[(r.layer, r.statistic)]).mean()) for r in df.itertuples()
        )
        print(f"discovered {variant} {backend}: max |probe - reference| {worst:.1e}")
        assert worst <= TOL, (backend, worst)


@pytest.mark.parametrize("variant", list(REFUSED))
def test_a_wrong_inferred_row_is_refused_naming_the_invariant(folders, unknown, variant):
    folder = folders(variant)
    unknown(_model_type(folder))
    with pytest.raises(DiscoveryError, match=REFUSED[variant].replace("(", r"\(").replace(")", r"\)")):
        load_probe_model(folder)


def test_the_cli_discovers_with_the_flag_and_refuses_without_it(folders, unknown, tmp_path, monkeypatch):
    folder = folders("gemma2")
    unknown(_model_type(folder))
    data = tmp_path / "text.txt"
    data.write_text(CORPUS[3])
    args = [
        "probe",
        str(folder),
        "--data",
        str(data),
        "--seq-len",
        str(SEQ_LEN),
        "--max-tokens",
        "0",
        "--json",
    ]
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "no")])
    assert r.exit_code == 1 and "--discover" in r.stderr and not (tmp_path / "no").exists()
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "yes"), "--discover"])
    assert r.exit_code == 0, r.output
    assert "inferred" in r.stderr
    assert json.loads(r.stdout)["provenance"]["architecture"]["adapter"]["source"] == "discovered"


def test_the_cli_refusal_of_a_failed_proof_is_one_line(folders, unknown, tmp_path):
    folder = folders("granite")
    unknown(_model_type(folder))
    data = tmp_path / "text.txt"
    data.write_text(CORPUS[3])
    out = tmp_path / "out"
    r = runner.invoke(app, ["probe", str(folder), "--data", str(data), "--out", str(out), "--discover"])
    err = r.stderr.strip().splitlines()
    assert r.exit_code == 1 and err[-1].startswith("error: cannot probe 'granite'"), r.output
    assert "Traceback" not in r.output and (not out.exists() or not any(out.iterdir()))


def test_discovery_is_off_by_default(folders, monkeypatch):
    monkeypatch.setattr(adapters, "_BY_TYPE", {k: v for k, v in adapters._BY_TYPE.items() if k != "qwen2"})
    with pytest.raises(UserError, match="unsupported architecture 'qwen2'.*--discover"):
        load_probe_model(folders("qwen2"))
