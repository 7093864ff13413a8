"""`python -m benchmarks [--quick] [--threads 1] [--only SECTION] [--malloc kept|system] [--out FILE]`:
every benchmark figure as a ratio with its spread (median of per-round ratios, min, max), printed and
written to JSON (benchmarks.json by default).

Ratios only: the machine this runs on is shared, so absolute times mean little, but a ratio taken within a
round (arms interleaved, order rotated) survives the load. Each ratio is printed by wall clock and by
process CPU clock (benchmarks/timing.py), over at least 7 rounds. --quick finishes in under two minutes on
an idle 2-core machine (smaller models and fewer rounds): a smoke run, not a measurement, and its lines
say so.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import bench_costs, bench_fixed, bench_probe, bench_train, section
from benchmarks.timing import MIN_ROUNDS, SMOKE

SECTIONS = {"probe": bench_probe, "costs": bench_costs, "fixed": bench_fixed, "train": bench_train}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    section.options(ap)
    ap.add_argument("--only", choices=list(SECTIONS), action="append", help="run only these sections")
    ap.add_argument("--out", type=Path, default=Path("benchmarks.json"))
    args = ap.parse_args()
    section.setup(args)
    logging.disable(logging.WARNING)
    started = time.time()
    if args.quick:
        print(f"--quick: {SMOKE} (fewer than {MIN_ROUNDS} rounds, small models)")
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or list(SECTIONS):
            module = SECTIONS[name]
            t = time.perf_counter()
            (Path(tmp) / name).mkdir()
            res = module.run(args.quick, Path(tmp) / name)
            print(f"{name} ({time.perf_counter() - t:.0f} s)")
            print("\n".join(module.report(res)), flush=True)
            results[name] = res
    doc = {
        "quick": args.quick,
        "threads": args.threads,
        "malloc": args.malloc,
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "seconds": round(time.time() - started, 1),
        "results": results,
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out} ({doc['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
