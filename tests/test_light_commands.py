"""The light commands start at once (issue 47): `tlm --help`, `tlm --version`, `tlm plot`, `tlm report` and
`tlm schedule`, each run as a user starts it (a fresh interpreter running cli.py as __main__), import neither
torch nor transformers. `import torch` alone took 2.2 s of the 3.2 s of `tlm --version`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "analyses" / "results" / "mechanism" / "SmolLM2-135M-Q4_1"  # a committed probe result
HEAVY = ("torch", "transformers", "transformer_lens", "nnsight", "accelerate")
WRAPPER = """
import json, runpy, sys
sys.argv = ["cli.py", *sys.argv[1:]]
code = 0
try:
    runpy.run_path("cli.py", run_name="__main__")
except SystemExit as e:
    code = e.code or 0
print(json.dumps({"code": code, "heavy": [m for m in HEAVY if m in sys.modules]}), file=sys.stderr)
""".replace("HEAVY", repr(HEAVY))

LIGHT = {
    "help": ["--help"],
    "version": ["--version"],
    "plot-help": ["plot", "--help"],
    "plot": ["plot", str(PROBE), "--out", "{tmp}/fig.png"],
    "plot-several": ["plot", str(PROBE), "-s", "align_mlp_mid", "-s", "block_influence",
                     "--out", "{tmp}/f2.png"],
    "plot-schedules": ["plot", "--kind", "schedules", "--out", "{tmp}/sched.png"],
    "report": ["report", str(PROBE), "--out", "{tmp}/report"],
    "schedule": ["schedule", "--layers", "12", "--d-ff", "1024", "--schedule", "cosine:1.5:0.5"],
    "schedule-json": ["schedule", "--schedule", "wider-early", "--json"],
}


@pytest.mark.parametrize("name", LIGHT)
def test_a_light_command_imports_no_model_library(name, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in LIGHT[name]]
    res = subprocess.run([sys.executable, "-c", WRAPPER, *args], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    out = json.loads(res.stderr.strip().splitlines()[-1])
    assert out["code"] == 0, res.stderr[-2000:]
    assert out["heavy"] == [], f"{name} imported {out['heavy']}"


def test_version_names_the_installed_versions():
    from importlib.metadata import version

    res = subprocess.run([sys.executable, "cli.py", "--version"], capture_output=True, text=True, cwd=ROOT,
                         check=True)
    assert res.stdout.split() == ["tlm_probe", "0.1.0,", "torch", f"{version('torch')},", "transformers",
                                  version("transformers")]


def _arrivals(args: list[str], cwd: Path) -> tuple[float, list[tuple[float, str]]]:
    """Seconds from the start to the exit of `python cli.py ARGS`, and each stderr line's arrival time."""
    import time

    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "cli.py", *args], cwd=cwd, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env={**_env(), "TERM": "dumb"})
    lines = [(time.perf_counter() - t0, line.rstrip()) for line in proc.stderr]
    assert proc.wait(timeout=300) == 0, lines
    return time.perf_counter() - t0, lines


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "TLM_ANNOUNCE_AFTER_S"}


def test_a_heavy_command_says_its_first_line_within_a_second_of_its_start(tmp_path):
    """`tlm probe` imports torch and transformers for seconds before its progress; it says so first, one
    second after its start, where the start is what a light command takes to run (`tlm --version`, timed
    here: a loaded machine slows both alike). Before: the first line came with the progress, 17 s in."""
    from models_zoo import build_model

    model = build_model("gpt2", tmp_path / "gpt2")
    start_up, _ = _arrivals(["--version"], ROOT)
    _, lines = _arrivals(["probe", str(model), "--out", str(tmp_path / "p"), "--max-tokens", "256"], ROOT)
    first_at, first = lines[0]
    assert first == "importing torch and transformers ..."
    assert first_at <= start_up + 1.0, (first_at, start_up)
    assert lines[1][1].startswith("importing torch and transformers: done in ")


def test_the_plot_floor_of_the_start_up_benchmark_draws_its_figure(tmp_path):
    """benchmarks/bench_start.py compares `tlm plot` with this script; it must draw what tlm plot draws."""
    out = tmp_path / "floor.png"
    subprocess.run([sys.executable, "benchmarks/plot_floor.py", str(PROBE), str(out)], cwd=ROOT, check=True,
                   timeout=300)
    assert out.stat().st_size > 10_000
