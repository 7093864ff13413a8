"""`--malloc kept|system` for every benchmark script: freed memory kept in the process as `tlm` runs
(tlm_probe/allocator.py; the default), or the system allocator's defaults."""

from __future__ import annotations

import argparse
import os


def add_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--malloc", choices=["kept", "system"], default="kept",
                    help="freed memory kept in the process, as `tlm` runs (default), or the system's")


def apply(args: argparse.Namespace) -> None:
    """kept: set it now; system: TLM_PROBE_MALLOC=system, so that probe() (which keeps freed memory on its
    first call) and the child processes leave the system's defaults too."""
    if args.malloc == "system":
        os.environ["TLM_PROBE_MALLOC"] = "system"
        return
    from tlm_probe.allocator import keep_freed_memory

    keep_freed_memory()
