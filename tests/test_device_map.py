"""Probing a model larger than memory (issue 34): --device-map/--max-memory dispatch the blocks with
transformers' own device_map (accelerate), really offloading some to disk here; the statistics equal a
single-device run's, and what needs every weight resident is refused in one line."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from models_zoo import build_model
from typer.testing import CliRunner

from cli import app
from tlm_probe.api.library import probe
from tlm_probe.capture.dispatch import parse_max_memory
from tlm_probe.errors import UserError

STATS = "alignment,ablation_dnll_mlp_zero,logit_lens_kl,dead_neuron_frac"
EPS32 = float(np.finfo(np.float32).eps)


@pytest.fixture(scope="module")
def ids(tmp_path_factory):
    path = tmp_path_factory.mktemp("ids") / "ids.npy"
    np.save(path, np.random.default_rng(0).integers(5, 100, (8, 32)).astype(np.uint32))
    return path


def _tlm_folder(folder):
    from tlm_probe.models.config import config_with_schedule
    from tlm_probe.models.io import save_tlm
    from tlm_probe.models.tlm import TaperedLM
    from tlm_probe.schedules.widths import parse_schedule

    torch.manual_seed(0)
    cfg = config_with_schedule(parse_schedule("cosine", multiple_of=16), 96, vocab_size=100, d_model=32,
                               n_layers=4, n_heads=4)
    save_tlm(TaperedLM(cfg).eval(), folder)
    return folder


def _bytes(folder) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


@pytest.mark.parametrize("family", ["llama", "tlm"])
def test_offloaded_probe_equals_the_single_device_one(tmp_path, ids, family):
    folder = build_model("llama", tmp_path / "m") if family == "llama" else _tlm_folder(tmp_path / "m")
    whole = probe(str(folder), str(ids), stats=STATS, full=True)
    cap = f"cpu={int(_bytes(folder) * 0.6)}"  # below the model's size: some blocks must go to disk
    split = probe(str(folder), str(ids), stats=STATS, device_map="auto", max_memory=cap, full=True)
    placed = split.provenance["dispatch"]["placed"]
    assert placed.get("disk", 0) >= 1 and placed.get("cpu", 0) >= 1, placed  # a real dispatch
    a = whole.table.set_index(["layer", "statistic"])["value"]
    b = split.table.set_index(["layer", "statistic"])["value"]
    assert sorted(a.index) == sorted(b.index)
    scale = np.maximum(1.0, np.abs(a.to_numpy())) * np.log(100)  # nats statistics scale with ln V
    assert np.all(np.abs(a - b.reindex(a.index)).to_numpy() <= 8 * EPS32 * scale)


def test_dispatch_refusals_are_one_line(tmp_path, ids):
    folder = build_model("llama", tmp_path / "m")
    runner = CliRunner()
    cases = {
        ("--stats", "taylor_mlp", "--device-map", "auto"): "need(s) every weight resident",
        ("--max-memory", "cpu=1MB"): "give --device-map too",
        ("--device-map", "auto", "--max-memory", "cpu=lots"): "is not a size",
        ("--device-map", "everywhere"): "--device-map must be one of",
    }
    for args, message in cases.items():
        args = ["probe", str(folder), "--data", str(ids), "--out", str(tmp_path / "o"), *args]
        res = runner.invoke(app, args)
        assert res.exit_code == 1, res.output
        assert message in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_max_memory_parsing():
    assert parse_max_memory("cpu=200MB, 0=1.5GiB") == {"cpu": 200_000_000, 0: int(1.5 * 2**30)}
    assert parse_max_memory("") is None
    with pytest.raises(UserError, match="DEVICE=SIZE"):
        parse_max_memory("cpu")


def _offloading(folder) -> dict:
    return {"device_map": "auto", "max_memory": f"cpu={int(_bytes(folder) * 0.6)}"}  # some blocks to disk


def test_offloaded_eval_equals_the_single_device_one(tmp_path, ids):
    """`tlm eval --device-map/--max-memory` (EvalOptions): the same perplexity, blocks on disk."""
    from tlm_probe.eval.run import EvalOptions, run_eval

    folder = build_model("llama", tmp_path / "m")
    opts = EvalOptions(ppl_data=(str(ids),), split="all", ppl_context=32, max_tokens=0)
    whole = run_eval(str(folder), opts)
    split = run_eval(str(folder), replace(opts, **_offloading(folder)))
    placed = split.provenance["dispatch"]["placed"]
    assert placed.get("disk", 0) >= 1 and placed.get("cpu", 0) >= 1, placed  # a real dispatch
    a, b = whole.table.set_index("metric")["value"], split.table.set_index("metric")["value"]
    assert list(a.index) == list(b.index) and (split.table["n"] == whole.table["n"]).all()
    assert np.allclose(a.to_numpy(), b.to_numpy(), rtol=16 * EPS32, atol=0)


def test_offloaded_generate_equals_the_single_device_one(tmp_path):
    """`tlm generate --device-map/--max-memory` (GenerateOptions): the same greedy ids, blocks on disk."""
    from tlm_probe.generation import GenerateOptions, generate_text, load_generator

    folder = build_model("llama", tmp_path / "m")
    prompt = "def main():\n    return"
    whole = generate_text(str(folder), prompt, GenerateOptions(max_new_tokens=12, device="cpu"))
    opts = GenerateOptions(max_new_tokens=12, device="cpu", **_offloading(folder))
    model = load_generator(str(folder), opts)[0]
    assert "disk" in set(model.hf_device_map.values()), model.hf_device_map  # a real dispatch
    split = generate_text(str(folder), prompt, opts)
    assert split["ids"] == whole["ids"] and len(whole["ids"]) > 0
