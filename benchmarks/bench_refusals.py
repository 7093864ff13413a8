"""Refusals before and after (issue 49): each bad input below run as a user runs it, `tlm` in a fresh process,
from this checkout and from another one (`--tree`: the code before a change), arms interleaved and rotated
(benchmarks/timing.py). Printed per case: median wall and process CPU time (the children's) of each tree, and
the per-round CPU ratio before / after. Every run must end in exit 1 with one `error:` line.

    python -m benchmarks.bench_refusals --tree OLD_CHECKOUT [--rounds 7] [--out FILE.json]

Cases: `tlm plot` of a probe folder with a layer at 10**6 (refused before matplotlib and seaborn load); a
--device-map naming no module of a GPT-2 checkpoint (refused from the safetensors header); a --device-map
with a .gguf file (refused before torch is imported); `tlm trust` with a text corpus of one short line
beside builtin:pydoc, on MiniLM (its half b is empty: judged before any corpus is probed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import models
from benchmarks.bench_start import PYCACHE, ROOT, run_env
from benchmarks.timing import MIN_ROUNDS, interleaved, ratio

PROBE = ROOT / "analyses" / "results" / "mechanism" / "SmolLM2-135M-Q4_1"


def bad_probe(folder: Path, source: Path = PROBE) -> Path:
    """A copy of the probe folder `source` (its files) whose first results.csv row is at layer 10**6, a layer
    no model has: what `tlm plot` and `tlm report` must refuse before their plotting imports (also
    tests/test_check_first.py's case)."""
    folder.mkdir()
    for f in source.iterdir():
        if f.is_file():
            (folder / f.name).write_bytes(f.read_bytes())
    lines = (source / "results.csv").read_text().splitlines()
    cells = lines[1].split(",")
    cells[lines[0].split(",").index("layer")] = "1000000"
    (folder / "results.csv").write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    return folder


def cases(tmp: Path) -> dict[str, list[str]]:
    gpt2 = models.gpt2(tmp / "gpt2", layers=2, d_model=64)
    (no_module := tmp / "map.json").write_text(json.dumps({"nothing": "cpu"}))
    (short := tmp / "short.txt").write_text("hi\n")
    out = str(tmp / "out")
    return {
        "plot: results.csv with a layer at 10**6": ["plot", str(bad_probe(tmp / "probe")), "--out",
                                                    out + ".png"],
        "probe: --device-map names no module": ["probe", str(gpt2), "--data", "builtin:pydoc", "--device-map",
                                                str(no_module), "--out", out],
        "probe: --device-map with a .gguf file": ["probe", str(models.smollm2()), "--data", "builtin:pydoc",
                                                  "--device-map", "auto", "--out", out],
        "trust: a text corpus with an empty half": ["trust", str(models.minilm()), "--data", "builtin:pydoc",
                                                    "--data", str(short), "--max-tokens", "4000", "--out",
                                                    out],
    }


def _refusal(argv: list[str], tree: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "tlm_probe", *argv], cwd=tree, env=run_env(tree),
                       capture_output=True, text=True)
    errors = [ln for ln in p.stderr.splitlines() + p.stdout.splitlines() if ln.startswith("error:")]
    if p.returncode != 1 or len(errors) != 1:
        raise SystemExit(f"{tree}: {argv[0]} did not refuse in one line (exit {p.returncode}): "
                         f"{p.stderr[-400:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, required=True, help="the checkout before the change")
    ap.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()
    trees = {"after": ROOT, "before": args.tree.resolve()}
    report = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in cases(Path(tmp)).items():
            fns = {k: (lambda t=t, a=argv: _refusal(a, t)) for k, t in trees.items()}
            times = interleaved(fns, args.rounds)
            med = {k: {"wall": sorted(times[k])[len(times[k]) // 2],
                       "cpu": sorted(times.cpu[k])[len(times.cpu[k]) // 2]} for k in trees}
            report[name] = {**med, "cpu ratio before / after": ratio(times, "before", "after")["cpu"]}
            r = report[name]["cpu ratio before / after"]
            b = med["before"]
            print(f"{name:44s} before {b['wall']:6.2f} s wall {b['cpu']:6.2f} s CPU | "
                  f"after {med['after']['wall']:5.2f} s wall {med['after']['cpu']:5.2f} s CPU | "
                  f"CPU ratio {r['median']:.1f}x [{r['min']:.1f}, {r['max']:.1f}], {r['rounds']} rounds")
    shutil.rmtree(PYCACHE, ignore_errors=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
