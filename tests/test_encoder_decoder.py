"""Encoder-decoder models (T5) are refused with the reason (capture/families/refused.py: the result table
has one depth axis per model), before any heavy import, on every path: the folder check, the loader with
discovery on (discovery must not map one of the two stacks and call it the model), and the CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import transformers as T
from models_zoo import CORPUS, VOCAB
from typer.testing import CliRunner

from cli import app
from tlm_probe.capture import adapters, load_probe_model
from tlm_probe.errors import UserError

REASON = "encoder-decoder model: two stacks"


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    folder = tmp_path_factory.mktemp("t5") / "t5"
    torch.manual_seed(0)
    cfg = T.T5Config(vocab_size=VOCAB, d_model=32, d_ff=64, d_kv=8, num_layers=2, num_heads=4)
    T.T5ForConditionalGeneration(cfg).save_pretrained(folder)
    return folder


def test_t5_is_refused_with_the_reason_before_heavy_imports(t5):
    code = (
        "import sys\n"
        "from tlm_probe.capture.adapters import check_folder\n"
        "from tlm_probe.errors import UserError\n"
        f"try:\n    check_folder({str(t5)!r})\nexcept UserError as e:\n    print(e)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'nnsight') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith(f"t5 models are not supported: {REASON}") and out.strip().endswith("[]"), out


def test_t5_is_not_discovered(t5, monkeypatch):
    monkeypatch.setattr(adapters, "DISCOVERY", {"enabled": True})
    with pytest.raises(UserError, match=REASON):
        load_probe_model(t5)


def test_the_cli_refuses_t5_in_one_line(t5, tmp_path):
    data = tmp_path / "text.txt"
    data.write_text(CORPUS[0])
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["probe", str(t5), "--data", str(data), "--out", str(out), "--discover"])
    err = r.stderr.strip()
    assert r.exit_code == 1 and "\n" not in err and REASON in err and "Traceback" not in r.output, r.output
    assert not out.exists()
