"""The `tlm` command keeps freed memory (glibc mallopt); TLM_PROBE_MALLOC=system opts out. Run in child
processes so this test process keeps the system's defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE = "from tlm_probe.allocator import keep_freed_memory; print(keep_freed_memory())"


def _child(env: dict) -> str:
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT), **env}, check=True)
    return r.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keeps_freed_memory_unless_told_not_to():
    assert _child({"TLM_PROBE_MALLOC": ""}) == "True"
    assert _child({"TLM_PROBE_MALLOC": "system"}) == "False"


def test_the_tlm_command_sets_it(monkeypatch):
    from tlm_probe import cli

    calls = []
    monkeypatch.setattr("tlm_probe.allocator.keep_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr("tlm_probe.threads.passive_omp_wait", lambda: True)  # this process keeps its own
    monkeypatch.setattr(cli, "app", lambda: None)
    cli.main()
    assert calls == [1]


PROBE = """
import ctypes, sys
import numpy as np
from tlm_probe.allocator import keep_freed_memory
from tlm_probe.api.library import probe

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p


def from_heap(nbytes: int) -> bool:
    # glibc serves a block above its largest mmap threshold (32 MB) with an mmap, unless freed memory is kept
    p = libc.malloc(nbytes)
    try:
        for row in open("/proc/self/maps"):
            lo, hi = (int(x, 16) for x in row.split()[0].split("-"))
            if lo <= p < hi:
                return row.rstrip().endswith("[heap]")
    finally:
        libc.free(ctypes.c_void_p(p))
    return False


np.save(sys.argv[2], np.random.default_rng(0).integers(0, 320, 64).astype(np.uint32))
before = from_heap(64 << 20)
for _ in range(2):
    probe(sys.argv[1], sys.argv[2], seq_len=16, max_tokens=None)
print(before, from_heap(64 << 20), keep_freed_memory.cache_info().misses)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_python_caller_of_probe_gets_it_once(tmp_path):
    """probe() from Python (not the `tlm` command) keeps freed memory too: a 64 MB block comes from the heap
    after it, not before; set once however many calls (issue 34)."""
    from models_zoo import build_model

    folder = build_model("llama", tmp_path / "llama")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TLM_PROBE_MALLOC": ""}
    r = subprocess.run([sys.executable, "-c", PROBE, str(folder), str(tmp_path / "ids.npy")],
                       capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[-3:] == ["False", "True", "1"]
