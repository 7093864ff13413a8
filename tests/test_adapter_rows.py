"""Rows a user adds without editing the package (--adapter ROW.json, register_adapter), the refusal of an
unknown type (naming the closest known one), and the docs site's family list (docs/concepts/families.md)
generated from the table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as T
from models_zoo import CORPUS, HEADS, LAYERS, VOCAB, D, _causal_tokenizer, _spread_weights
from test_families import SEQ, SEQ_LEN, _reference_values
from typer.testing import CliRunner

from cli import app
from tlm_probe.capture import adapters, load_probe_model
from tlm_probe.capture.family_table import END, START, family_table
from tlm_probe.errors import UserError

FAMILIES_PAGE = Path(__file__).resolve().parent.parent / "docs" / "concepts" / "families.md"
runner = CliRunner()

# Helium: a transformers model type with no row in the table, laid out as Llama (modeling_helium.py)
HELIUM_ROW = {
    "family": "helium (user)",
    "model_types": ["helium"],
    "layers": "layers",
    "mlp": "mlp",
    "mlp_down": "mlp.down_proj",
    "final_norm": "norm",
    "lm_head": "lm_head",
    "block_kind": "sequential",
    "taps": {
        "resid_pre": ":in",
        "attn_out": "self_attn:out",
        "resid_mid": "post_attention_layernorm:in",
        "mlp_out": "mlp:out",
        "resid_post": ":out",
        "mlp_post": "mlp.down_proj:in",
    },
}


@pytest.fixture(autouse=True)
def _no_user_rows(monkeypatch):
    monkeypatch.setattr(adapters, "_USER", {})  # a registered row lives for the process: not across tests


@pytest.fixture(scope="module")
def helium(tmp_path_factory):
    folder = tmp_path_factory.mktemp("helium") / "helium"
    torch.manual_seed(0)
    cfg = T.HeliumConfig(
        vocab_size=VOCAB,
        hidden_size=D,
        intermediate_size=80,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=2,
        head_dim=8,
        pad_token_id=0,
    )
    model = T.AutoModelForCausalLM.from_config(cfg).eval()
    _spread_weights(model)
    model.save_pretrained(folder)
    _causal_tokenizer().save_pretrained(folder)
    return folder


def _row_file(tmp_path, **change) -> Path:
    path = tmp_path / "row.json"
    path.write_text(json.dumps({**HELIUM_ROW, **change}))
    return path


def _probe(folder, out, *extra):
    data = out.parent / "text.txt"
    data.write_text(CORPUS[3])
    return runner.invoke(
        app,
        [
            "probe",
            str(folder),
            "--data",
            str(data),
            "--out",
            str(out),
            "--seq-len",
            str(SEQ_LEN),
            "--max-tokens",
            "0",
            "--json",
            *extra,
        ],
    )


def test_unknown_type_is_refused_naming_the_closest_known_and_how_to_add(helium, tmp_path):
    with pytest.raises(UserError, match="Closest known type: qwen2 .*--adapter ROW.json.*register_adapter"):
        adapters.adapter_for("qwen2_vl")
    r = _probe(helium, tmp_path / "out")
    assert r.exit_code == 1 and "unsupported architecture 'helium'" in r.stderr
    assert not (tmp_path / "out").exists()


def test_a_user_row_is_proved_used_and_recorded(helium, tmp_path):
    r = _probe(helium, tmp_path / "out", "--adapter", str(_row_file(tmp_path)))
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    adapter = res["provenance"]["architecture"]["adapter"]
    assert adapter["source"] == "user" and adapter["family"] == "helium (user)"
    # against the independent reference of test_families (layer outputs under interventions, float64)
    adapters.register_adapter(adapters.load_adapter_file(_row_file(tmp_path)))
    pm = load_probe_model(helium)
    model = T.AutoModelForCausalLM.from_pretrained(helium, dtype=torch.float64).eval()
    ref: dict = {}
    _reference_values("helium", model, pm, model.model.layers, ref, layout=SEQ, texts=[CORPUS[3]])
    for row in res["results"]:
        expect = torch.tensor([v for vs in ref[(row["layer"], row["statistic"])] for v in vs]).mean()
        assert abs(row["value"] - float(expect)) <= 1e-5, row


@pytest.mark.parametrize(
    "change, match",
    [
        ({"taps": {**HELIUM_ROW["taps"], "resid_mid": "post_attention_layernorm:out"}}, "is not resid_pre"),
        ({"taps": {**HELIUM_ROW["taps"], "mlp_out": "feed_forward:out"}}, "has no module 'feed_forward'"),
        ({"block_kind": "hybrid"}, "block_kind 'hybrid' is not one of"),
        ({"mlp": None, "extra": 1}, "unknown fields ['extra']"),
    ],
)
def test_a_wrong_user_row_is_refused_with_one_line(helium, tmp_path, change, match):
    r = _probe(helium, tmp_path / "out", "--adapter", str(_row_file(tmp_path, **change)))
    assert r.exit_code == 1, r.output
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err and match in err, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_docs_family_list_is_the_table():
    text = FAMILIES_PAGE.read_text()
    assert START in text and END in text, "docs/concepts/families.md lost its generated family block"
    block = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert block == family_table(), "the families page differs: run python -m tlm_probe.capture.family_table"
    assert len(block.splitlines()) == 2 + len(adapters.ADAPTERS) + len(adapters.STACKS)


def test_per_layer_widths_are_read_from_the_model(tmp_path):
    """A Llama whose layer 1 MLP was narrowed (pruned, or tapered by hand): d_ff comes from the weights,
    not the config's one intermediate_size, and the statistics match the reference layer by layer."""
    import copy

    from tlm_probe.api.library import probe
    from tlm_probe.capture import wrap_model

    torch.manual_seed(0)
    cfg = T.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=D,
        intermediate_size=80,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=2,
    )
    model = T.AutoModelForCausalLM.from_config(cfg).eval()
    mlp = model.model.layers[1].mlp
    mlp.gate_proj, mlp.up_proj = torch.nn.Linear(D, 40, bias=False), torch.nn.Linear(D, 40, bias=False)
    mlp.down_proj = torch.nn.Linear(40, D, bias=False)
    _spread_weights(model)
    pm = wrap_model(model, _causal_tokenizer(), "narrowed")
    assert pm.d_ff == (80, 40, 80)
    df = probe(pm, CORPUS, seq_len=SEQ_LEN, batch_size=3, max_tokens=None)
    assert list(df.groupby("layer").d_ff.first()) == [80, 40, 80]
    double = copy.deepcopy(model).double()
    ref: dict = {}
    _reference_values("llama", double, pm, double.model.layers, ref, layout=SEQ, texts=CORPUS)
    for row in df.itertuples():
        expect = np.concatenate(ref[(row.layer, row.statistic)]).mean()
        assert abs(row.value - expect) <= 1e-5, (row.layer, row.statistic)
