import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from tlm_probe.models.accounting import count_params
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.schedules.widths import ScheduleSpec, make_schedule

runner = CliRunner()


def test_schedule_json_matches_library():
    args = ["schedule", "--layers", "24", "--d-ff", "4096", "--schedule", "cosine", "--start", "1.5",
            "--end", "0.5", "--d-model", "1024", "--json"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    ref = make_schedule(ScheduleSpec("cosine", 1.5, 0.5), 24, 4096)
    assert out["widths"] == list(ref.widths)
    assert out["widths"][0] == 6144 and out["widths"][-1] == 2048 and out["total"] == 98304
    assert out["uniform_total"] == 98304
    base = dict(vocab_size=32000, d_model=1024, n_layers=24, n_heads=16, max_seq_len=4096)
    assert out["params"] == count_params(TLMConfig(d_ff=ref.widths, **base)).total
    assert out["uniform_params"] == count_params(TLMConfig(d_ff=(4096,) * 24, **base)).total
    assert out["params"] == out["uniform_params"] and out["parity"] is True


def test_schedule_spec_string_and_table():
    r = runner.invoke(app, ["schedule", "--layers", "6", "--d-ff", "512", "--schedule", "linear:1.8:0.2"])
    assert r.exit_code == 0 and "parity: yes" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["--schedule", "bogus"], "bogus"),
    (["--layers", "0"], "layers"),
    (["--start", "-1"], "start"),
    (["--d-ff", "100"], "multiple"),
    (["--d-ff", "128", "--end", "0.01", "--layers", "24"], "rounds to 0"),
])
def test_schedule_bad_input_one_line_exit_1(args, needle):
    r = runner.invoke(app, ["schedule", *args])
    assert r.exit_code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.output


def test_info(tmp_path):
    cfg = TLMConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, d_ff=(96, 32), max_seq_len=16)
    save_tlm(TaperedLM(cfg), tmp_path / "ck")
    r = runner.invoke(app, ["info", str(tmp_path / "ck"), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [l["d_ff"] for l in out["layers"]] == [96, 32]
    assert out["params"] == sum(p.numel() for p in TaperedLM(cfg).parameters())
    r = runner.invoke(app, ["info", str(tmp_path / "nope")])
    assert r.exit_code == 1 and "not found" in r.stderr


def test_console_script_exit_codes(tmp_path):
    venv_tlm = Path(sys.executable).parent / "tlm"
    tlm = str(venv_tlm) if venv_tlm.exists() else shutil.which("tlm")
    bad = subprocess.run([tlm, "info", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    usage = subprocess.run([tlm, "schedule", "--no-such-flag"], capture_output=True, text=True)
    assert usage.returncode == 2
    ok = subprocess.run([tlm, "schedule", "--help"], capture_output=True, text=True)
    assert ok.returncode == 0 and "Example:" in ok.stdout


def test_plot_help_names_match_the_figure_builders():
    from tlm_probe.plotting.options import FIGURES

    assert all(callable(build) for build in FIGURES.values())  # every kind's builder is importable


def test_cli_starts_without_heavy_imports():
    heavy = "('torch', 'transformers', 'matplotlib')"
    code = f"import sys, cli; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
