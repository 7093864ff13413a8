import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlm_probe.schedules.widths import ScheduleError, ScheduleSpec, make_schedule, parse_schedule

TAPERS = ("linear", "cosine", "sigmoid")


def test_paper_cosine_example_exact():
    s = make_schedule(ScheduleSpec("cosine", 1.5, 0.5), 24, 4096)
    assert s.widths[0] == 6144 and s.widths[-1] == 2048 and s.total == 98304


def test_cosine_matches_closed_form_when_no_rounding_needed():
    # with multiple_of=1 and a large d_ff the widths are the half-cosine values up to rounding by one unit
    L, d_ff = 9, 100_000
    s = make_schedule(ScheduleSpec("cosine", 1.5, 0.5, multiple_of=1), L, d_ff)
    for l, w in enumerate(s.widths):
        t = l / (L - 1)
        ref = (0.5 + (1.5 - 0.5) * (1 + math.cos(math.pi * t)) / 2) * d_ff
        assert abs(w - ref) <= 1


@settings(max_examples=300, deadline=None)
@given(
    L=st.integers(1, 64),
    units=st.integers(2, 200),
    multiple_of=st.sampled_from([1, 8, 32, 64, 128]),
    name=st.sampled_from(TAPERS),
    start=st.floats(1.0, 3.0),
    end=st.floats(0.05, 1.0),
)
def test_tapers_exact_budget_monotone_multiples(L, units, multiple_of, name, start, end):
    d_ff = units * multiple_of
    try:
        s = make_schedule(ScheduleSpec(name, start, end, multiple_of=multiple_of), L, d_ff)
    except ScheduleError as e:
        assert "rounds to" in str(e)  # only a too-narrow layer may be refused
        return
    assert sum(s.widths) == L * d_ff
    assert all(w % multiple_of == 0 and w > 0 for w in s.widths)
    assert all(a >= b for a, b in zip(s.widths, s.widths[1:], strict=False))


@settings(max_examples=100, deadline=None)
@given(L=st.integers(3, 48), units=st.integers(4, 100), factor=st.floats(1.1, 1.9),
       name=st.sampled_from(["wider-early", "wider-middle", "wider-late"]))
def test_grouped_exact_budget_and_order(L, units, factor, name):
    d_ff = units * 64
    try:
        s = make_schedule(ScheduleSpec(name, wide_factor=factor), L, d_ff)
    except ScheduleError as e:
        assert "rounds to" in str(e) or "narrow" in str(e)
        return
    assert sum(s.widths) == L * d_ff
    thirds = [[w for i, w in enumerate(s.widths) if (i * 3) // L == g] for g in range(3)]
    wide = {"wider-early": 0, "wider-middle": 1, "wider-late": 2}[name]
    others = [w for g in range(3) if g != wide for w in thirds[g]]
    assert min(thirds[wide]) >= max(others)


def test_rescaled_ratios_reported():
    s = make_schedule(ScheduleSpec("linear", 2.0, 1.0, multiple_of=1), 5, 3000)  # r_s + r_e = 3
    assert sum(s.widths) == 15000
    assert s.effective_start == pytest.approx(4 / 3, abs=1e-3)
    assert s.effective_end == pytest.approx(2 / 3, abs=1e-3)


def test_uniform_and_explicit():
    assert make_schedule("uniform", 4, 256).widths == (256,) * 4
    assert make_schedule(parse_schedule("384,256,256,128"), 4, 256).widths == (384, 256, 256, 128)
    with pytest.raises(ScheduleError, match="budget"):
        make_schedule(parse_schedule("384,256,256,256"), 4, 256)


def test_parse_spec_strings():
    assert parse_schedule("cosine:1.4:0.6") == ScheduleSpec("cosine", 1.4, 0.6)
    assert parse_schedule("sigmoid:1.5:0.5:4").steepness == 4
    assert parse_schedule("wider-late:1.8").wide_factor == 1.8


@pytest.mark.parametrize(
    "spec,L,d_ff,match",
    [
        (ScheduleSpec("bogus"), 4, 256, "bogus"),
        (ScheduleSpec("cosine"), 0, 256, "layers"),
        (ScheduleSpec("cosine", -1.0, 0.5), 4, 256, "start"),
        (ScheduleSpec("cosine", float("nan"), 0.5), 4, 256, "nan"),
        (ScheduleSpec("cosine", 1.5, 0.01), 24, 128, "rounds to 0"),
        (ScheduleSpec("cosine"), 4, 100, "multiple"),
    ],
)
def test_impossible_requests_name_the_value(spec, L, d_ff, match):
    with pytest.raises(ScheduleError, match=match):
        make_schedule(spec, L, d_ff)
