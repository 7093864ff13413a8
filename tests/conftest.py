"""Shared test set-up: never touch the network; deterministic, small thread count."""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# probe() keeps freed memory in its process (tlm_probe/allocator.py): the test process keeps the system's
# allocator, so its memory shrinks back between tests (tests/test_allocator.py checks both in children)
os.environ.setdefault("TLM_PROBE_MALLOC", "system")
# tests never read or write the user's cache (built corpora, weight hashes): a fresh folder per session
_CACHE = tempfile.mkdtemp(prefix="tlm-probe-test-cache-")
os.environ["TLM_PROBE_CACHE"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402

# under pytest-xdist each worker has a core of its own: one thread each, so two workers do not fight for two
# cores (PYTEST_XDIST_WORKER_COUNT is set in workers only)
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") != "1" else 2)


@pytest.fixture
def one_thread():
    """Tiny forwards and the Titans memory's many small ops only lose from threads: on a busy 2-core
    machine a thread pool cost 20x (measured 0.5 s vs 0.025 s)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def real_probe_dirs(tmp_path_factory):
    """Probe result folders of tiny uniform/tapered tlm models, written by the real probe engine
    (plotting and report tests draw from these; see tests/plotting_tables.py)."""
    from plotting_tables import real_probe_results

    return real_probe_results(tmp_path_factory.mktemp("real-probes"), stats="all", max_tokens=192)


@pytest.fixture(scope="session")
def real_demo_dir(tmp_path_factory):
    """`tlm demo --quick` with two seeds: a real comparison folder (runs, tables, probe folders) for the
    plotting and report tests."""
    from tlm_probe.workflows.demo import run_demo

    out = tmp_path_factory.mktemp("real-demo") / "demo"
    run_demo(out, quick=True, steps=4, seeds=[0, 1])
    return out
