"""Seconds to a heavy command's first line (issue 47: within 1 s of its start) beside a light command's
whole run: each heavy command of benchmarks/first_line.py started as a user starts it and stopped when
its first line arrives, and `tlm --version` run to its end. Arms interleaved and rotated
(benchmarks/timing.py); per round the ratio first line / `tlm --version`, median [min, max] by wall and by
process CPU clock (the children's), and each arm's median seconds.

`python -m benchmarks.bench_first_line [--rounds 7] [--commands train,probe,...] [--out FILE.json]`
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks.first_line import HEAVY, LIGHT_REFERENCE, ROOT, args_of, first_line, make_inputs, whole_run
from benchmarks.timing import MIN_ROUNDS, interleaved, line, ratio

REFERENCE = "tlm --version"


def arms(names: list[str], w: Path, tmp: Path) -> dict:
    runs = iter(range(10**9))  # a fresh output folder for every start

    def start(name: str):
        o = tmp / f"o{next(runs)}"
        o.mkdir()
        got = first_line(args_of(name, w, o), tmp)
        if got.code is not None:  # it ended before saying anything useful: not a measurement
            raise RuntimeError(f"{name} exited {got.code}: {got.line}")

    fns = {REFERENCE: lambda: whole_run(LIGHT_REFERENCE, ROOT)}
    fns.update({name: (lambda n=name: start(n)) for name in names})
    return fns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    ap.add_argument("--commands", default=",".join(HEAVY), help="comma-separated names of HEAVY")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()
    names = [n.strip() for n in args.commands.split(",") if n.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        w = make_inputs(Path(tmp) / "inputs")
        fns = arms(names, w, Path(tmp))
        times = interleaved(fns, args.rounds)
    report = {name: ratio(times, name, REFERENCE) for name in names}
    report["seconds"] = {n: {"wall": statistics.median(times[n]), "cpu": statistics.median(times.cpu[n])}
                         for n in fns}
    print(f"first line / whole `{REFERENCE}` (a heavy command's first line costs a light command's start)")
    for name in names:
        print(line(name, report[name]))
    for name, s in report["seconds"].items():
        what = "whole run" if name == REFERENCE else "to the first line"
        print(f"  {name:24s} {what:18s} median wall {s['wall']:.2f} s, cpu {s['cpu']:.2f} s")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
