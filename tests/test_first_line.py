"""A heavy command says its first line within a second of its start (issue 47): every command that imports
torch and transformers (benchmarks/first_line.py's HEAVY, each with inputs it accepts), started as a user
starts it, says "importing torch and transformers ..." before that import, after its argument checks.

Timed by the process's own CPU clock when the line arrives (read from /proc): on a loaded machine the
wall clock counts the waits for a core, which are not the command's. A command that imported torch
before its first line would show its import, 2 s and more of CPU; the light start-up it pays instead is
that of `tlm --version` (about 0.6 s of CPU here, printed beside a failure). The wall clock is not
asserted: on this shared machine it was 3.4 s for a line at 0.56 s of CPU (benchmarks/bench_first_line.py
reports both)."""

from __future__ import annotations

import sys

import pytest

from benchmarks.first_line import HEAVY, LIGHT_REFERENCE, ROOT, args_of, first_line, make_inputs, whole_run
from tlm_probe.progress import FIRST_LINE_S

PHASE = "importing torch and transformers ..."
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/stat")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return make_inputs(tmp_path_factory.mktemp("first-line"))


@pytest.fixture(scope="module")
def light():
    """What start-up alone costs now (printed beside a failure)."""
    return whole_run(LIGHT_REFERENCE, ROOT)


@pytest.mark.parametrize("name", HEAVY)
def test_a_heavy_command_says_its_first_line_within_a_second(name, inputs, light, tmp_path):
    # FIRST_LINE_S of CPU; on a machine so slow that a light command's whole start costs more, 1.5x that
    # start (an import of torch before the line would add 2 s and more either way)
    bound = max(FIRST_LINE_S, 1.5 * light.cpu)
    got = first_line(args_of(name, inputs, tmp_path), tmp_path)
    if got.cpu > bound:  # a load spike (CPU time also grows when cores are shared): once more
        got = min(got, first_line(args_of(name, inputs, tmp_path / "again"), tmp_path), key=lambda r: r.cpu)
    assert got.line == PHASE, got
    assert got.cpu <= bound, (got, light)


def test_an_argument_refused_before_the_imports_is_one_line(inputs, tmp_path):
    """The phase comes after the argument checks: a bad value is the only line, and no torch is imported."""
    res = whole_run(["train", "--data", str(inputs / "corpus.txt"), "--steps", "0", "--out",
                     str(tmp_path / "r")], ROOT)
    assert res.code == 1 and res.line.startswith("error: --steps must be >= 1"), res
