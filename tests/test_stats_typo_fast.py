"""`tlm probe --stats TYPO` is refused by ProbeOptions at start-up (statistic_names.py holds every name
without torch): one `error:` line with the closest names, in about the time `--help` takes, and no model
library imported."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tlm_probe.errors import UserError
from tlm_probe.probe.options import ProbeOptions

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps([m for m in ("torch", "transformers") if m in sys.modules])))
import cli
sys.argv = ["tlm", *sys.argv[1:]]
cli.main()
"""


def _tlm(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, cwd=ROOT,
                       env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    return r, time.perf_counter() - t0


def test_a_typo_in_stats_is_refused_at_start_up_in_one_line(tmp_path):
    from models_zoo import build_model

    model = build_model("gpt2", tmp_path / "gpt2")  # a model that loads: only the typo is wrong
    args = ("probe", str(model), "--stats", "align_mlp_mdi,importance", "--out", str(tmp_path / "o"))
    bad, t_bad = min((_tlm(*args) for _ in range(2)), key=lambda rt: rt[1])
    help_, t_help = min((_tlm("probe", "--help") for _ in range(2)), key=lambda rt: rt[1])
    assert bad.returncode == 1 and help_.returncode == 0
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown statistic 'align_mlp_mdi'"), bad.stderr
    assert "did you mean align_mlp_mid" in lines[0]
    assert json.loads(bad.stdout.strip().splitlines()[-1]) == []  # neither torch nor transformers loaded
    assert t_bad < 3 * t_help, (t_bad, t_help)


@pytest.mark.parametrize("spec, says", [("bogus", "names: align_mlp_mid"), (" , ", "names no statistics"),
                                        ("alignment,spearman_taylr_mlp", "did you mean spearman_taylor_mlp")])
def test_probe_options_resolve_stats_names(spec, says):
    with pytest.raises(UserError, match=says):
        ProbeOptions(stats=spec)
    assert ProbeOptions(stats="importance,align_mlp_mid").stats == "importance,align_mlp_mid"
