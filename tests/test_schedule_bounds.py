"""bounded_ratios on a skewed statistic: a real probe's ablation ΔNLL is dominated by layer 0 (the
study's source model: 2.84 at layer 0, 0.007-0.56 elsewhere). Every weight is positive, so any
max_ratio >= 1 can hold the budget; the search must still find c (it once stopped at the bound where
only the largest weight reaches max_ratio and refused)."""

import pytest

from tlm_probe.schedules.rules import ScheduleError, bounded_ratios

SKEWED = [2.842545, 0.558417, 0.025858, 0.012993, 0.006994, 0.009244, 0.008759, 0.020736, 0.092235]


@pytest.mark.parametrize("lo,hi", [(0.25, 2.0), (0.0, 1.5), (0.5, 1.25)])
def test_skewed_weights_hold_the_budget(lo, hi):
    r = bounded_ratios(SKEWED, lo, hi)
    assert abs(sum(r) - len(SKEWED)) < 1e-9 * len(SKEWED)  # bisection to float resolution
    assert all(lo - 1e-12 <= x <= hi + 1e-12 for x in r)
    # closed form: the clip is proportional between its bounds, so unclipped ratios keep the weights' ratios
    free = [(x, w) for x, w in zip(r, SKEWED, strict=True) if lo < x < hi]
    for (x1, w1), (x2, w2) in zip(free, free[1:], strict=False):
        assert abs(x1 / x2 - w1 / w2) < 1e-9 * (w1 / w2)


def test_zero_weights_beyond_the_cap_are_refused():
    # two positive weights of nine, capped at 2x: at most 2*2 + 7*0 = 4 < 9 -> impossible, said so
    with pytest.raises(ScheduleError, match="cannot hold the budget"):
        bounded_ratios([1.0, 0.5] + [0.0] * 7, 0.0, 2.0)


def test_a_deep_kv_schedule_is_one_error_line_not_a_recursion_traceback():
    """Found while bounding --layers (issue 36): the exact key/value-head search recursed once per layer and
    died of a RecursionError from about 500 layers; it is refused in one line above its limit."""
    from typer.testing import CliRunner

    from cli import app

    res = CliRunner().invoke(app, ["schedule", "--component", "kv", "--heads", "16", "--kv-heads", "4",
                                   "--layers", "500"])
    assert res.exit_code == 1 and "at most 256 layers" in res.output and "Traceback" not in res.output
