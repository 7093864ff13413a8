"""The command line every benchmark section shares (`python -m benchmarks.bench_probe|bench_costs|bench_train
[--quick] [--threads 1] [--rounds N] [--malloc kept|system]`): the same options as `python -m benchmarks`,
one section, its report and its JSON."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from types import ModuleType

import torch

from benchmarks import malloc


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--quick", action="store_true", help="small sizes and few rounds")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for every arm (default 1)")
    malloc.add_option(ap)


def setup(args: argparse.Namespace) -> None:
    malloc.apply(args)
    torch.set_num_threads(args.threads)


def main(module: ModuleType) -> None:
    ap = argparse.ArgumentParser(description=module.__doc__.splitlines()[0])
    options(ap)
    ap.add_argument("--rounds", type=int, default=None, help="timing rounds (default: the section's)")
    args = ap.parse_args()
    setup(args)
    with tempfile.TemporaryDirectory() as tmp:
        res = module.run(args.quick, Path(tmp), args.rounds)
    print("\n".join(module.report(res)))
    print(json.dumps(res))
