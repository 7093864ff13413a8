"""`tlm info` reads config.json without importing torch, transformers or transformer_lens (start-up time)."""

import json
import subprocess
import sys
from pathlib import Path

from tlm_probe.models.accounting import count_params
from tlm_probe.models.presets import preset_config

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import json, sys
from typer.testing import CliRunner
import cli
r = CliRunner().invoke(cli.app, ["info", sys.argv[1], "--json"])
assert r.exit_code == 0, r.output
heavy = [m for m in ("torch", "transformers", "transformer_lens") if m in sys.modules]
print(json.dumps({"heavy": heavy, "params": json.loads(r.stdout)["params"]}))
"""


def test_info_on_the_1_3b_preset_imports_no_model_library(tmp_path):
    cfg = preset_config("tlm-1.3b", "cosine:1.5:0.5")
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))  # a config file: no weights needed
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "config.json")], capture_output=True, text=True,
        cwd=ROOT, check=True,
    )
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["heavy"] == []
    assert out["params"] == count_params(cfg).total == 1_321_766_656
