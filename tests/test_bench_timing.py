"""benchmarks/timing.py times every arm by wall clock and by process CPU clock (issue 34): CPU time that
another thread of the process or a child process spends is counted, time spent waiting is not, and a
figure from fewer than MIN_ROUNDS rounds is printed as a smoke run."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from benchmarks.timing import MIN_ROUNDS, SMOKE, interleaved, line, per_round, ratio

BURN = 0.05  # CPU seconds each burning arm spends


def _burn(seconds: float = BURN) -> None:
    t = time.thread_time()
    while time.thread_time() - t < seconds:
        pass


def _in_thread() -> None:  # another thread of this process burns (as torch's intra-op workers do)
    th = threading.Thread(target=_burn)
    th.start()
    th.join()


def _in_child() -> None:  # a child process burns (the arms that run `tlm` or a script)
    code = f"import time\nt = time.thread_time()\nwhile time.thread_time() - t < {BURN}: pass"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cpu_clock_counts_threads_and_children_not_waits():
    arms = {"here": _burn, "thread": _in_thread, "child": _in_child, "sleep": lambda: time.sleep(BURN)}
    t = interleaved(arms, rounds=2, warmup=0)
    assert set(t.cpu) == set(t) and all(len(v) == 2 for v in [*t.values(), *t.cpu.values()])
    for arm in ("here", "thread", "child"):
        assert min(t.cpu[arm]) >= 0.9 * BURN, (arm, t.cpu[arm])
    assert max(t.cpu["sleep"]) < 0.5 * BURN and min(t["sleep"]) >= BURN  # waited, not computed
    r = ratio(t, "sleep", "here")  # each clock's ratio from that clock's seconds
    assert r["cpu"]["median"] < 0.5 and r["median"] > 10 * r["cpu"]["median"]


def test_per_round_applies_one_formula_to_each_clock():
    t = interleaved({"a": _burn, "b": lambda: _burn(2 * BURN)}, rounds=3, warmup=0)
    r = per_round(t, lambda s: s["b"] - s["a"])
    assert r["rounds"] == 3 and abs(r["cpu"]["median"] - BURN) < 0.5 * BURN
    assert "cpu" not in ratio({"a": [1.0, 2.0], "b": [2.0, 2.0]}, "a", "b")  # wall seconds only: no CPU


def test_line_prints_both_clocks_and_marks_a_smoke_run():
    t = interleaved({"a": _burn, "b": _burn}, rounds=1, warmup=0)
    smoke = line("a / b", ratio(t, "a", "b"))
    assert "wall" in smoke and "cpu" in smoke and SMOKE in smoke and "(1 rounds" in smoke
    full = {"median": 1.0, "min": 0.9, "max": 1.1, "rounds": MIN_ROUNDS}
    measured = line("a / b", {**full, "cpu": full})
    assert SMOKE not in measured and measured.count("[0.900, 1.100]") == 2
