"""`tlm plot` of an existing probe against its floor (issue 47): both run as fresh processes, the floor
being benchmarks/plot_floor.py (pandas, seaborn, matplotlib, typer and rich imported, one figure saved).
Arms interleaved and rotated (benchmarks/timing.py); the figure is the median over rounds of the per-round
ratio of process CPU time (the children's), beside wall time. Target: <= 1.3x. `--tree DIR` runs `tlm` from
another checkout as a third arm (the code before a change).

`python -m benchmarks.bench_start [--rounds 7] [--probe DIR] [--tree DIR] [--out FILE.json]`
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.timing import MIN_ROUNDS, interleaved, line, ratio

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "analyses" / "results" / "mechanism" / "SmolLM2-135M-Q4_1"
TARGET = 1.3


PYCACHE = Path(tempfile.mkdtemp(prefix="tlm-bench-pycache-"))


def run_env(cwd: Path) -> dict[str, str]:
    """The environment of a `python` started in checkout `cwd` as a user runs it: offline, bytecode cached
    (under PYCACHE, nothing written in the checkout; the warm-up round fills it), as an installed package
    has it. With PYTHONDONTWRITEBYTECODE set, as on the machines these benchmarks were written on, every
    start compiled ~100 modules again."""
    env = {**os.environ, "PYTHONPATH": str(cwd), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPYCACHEPREFIX": str(PYCACHE / cwd.name)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _run(args: list[str], cwd: Path) -> None:
    """`python ARGS` in `cwd` (run_env)."""
    subprocess.run([sys.executable, *args], cwd=cwd, env=run_env(cwd), check=True, capture_output=True)


def arms(probe: Path, out: Path, tree: Path | None) -> dict:
    fns = {
        "floor": lambda: _run(["benchmarks/plot_floor.py", str(probe), str(out / "floor.png")], ROOT),
        "tlm plot": lambda: _run(["cli.py", "plot", str(probe), "--out", str(out / "plot.png")], ROOT),
        "tlm --version": lambda: _run(["cli.py", "--version"], ROOT),
    }
    if tree is not None:
        fns["tlm plot (--tree)"] = lambda: _run(["cli.py", "plot", str(probe), "--out", str(out / "t.png")],
                                                tree)
        fns["tlm --version (--tree)"] = lambda: _run(["cli.py", "--version"], tree)
    return fns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    ap.add_argument("--probe", type=Path, default=PROBE)
    ap.add_argument("--tree", type=Path, help="another checkout whose `tlm` runs as an extra arm")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fns = arms(args.probe.resolve(), Path(tmp), args.tree.resolve() if args.tree else None)
        try:
            times = interleaved(fns, args.rounds)  # the warm-up round also fills the bytecode cache
        finally:
            shutil.rmtree(PYCACHE, ignore_errors=True)
    report = {name: ratio(times, name, "floor") for name in fns if name != "floor"}
    report["seconds"] = {n: {"wall": sorted(times[n])[len(times[n]) // 2],
                             "cpu": sorted(times.cpu[n])[len(times.cpu[n]) // 2]} for n in fns}
    print(f"ratio to the floor (benchmarks/plot_floor.py), target for tlm plot <= {TARGET}x by CPU clock")
    for name in fns:
        if name != "floor":
            print(line(name, report[name]))
    for name, s in report["seconds"].items():
        print(f"  {name:58s} median wall {s['wall']:.2f} s, cpu {s['cpu']:.2f} s")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
