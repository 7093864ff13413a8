import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlm_probe.schedules.widths import ScheduleError, ScheduleSpec, make_schedule, parse_schedule

TAPERS = ("linear", "cosine", "sigmoid")


def test_paper_cosine_example_exact():
    s = make_schedule(ScheduleSpec("cosine", 1.5, 0.5), 24, 4096)
    assert s.widths[0] == 6144 and s.widths[-1] == 2048 and s.total == 98304


def test_numpys_integers_are_layer_counts_and_fractions_are_not():
    import numpy as np

    s = make_schedule(ScheduleSpec("cosine", 1.5, 0.5), np.int64(24), np.int32(4096))
    assert s.widths == make_schedule(ScheduleSpec("cosine", 1.5, 0.5), 24, 4096).widths
    assert all(type(w) is int for w in s.widths) and type(s.n_layers) is int
    for bad in (24.0, True, "24"):
        with pytest.raises(ScheduleError, match="number of layers must be an integer"):
            make_schedule(ScheduleSpec("cosine", 1.5, 0.5), bad, 4096)


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


# ---- tlm schedule's options (issue 32: one dataclass per concept; issue 36: bounded inputs) ---------------
def _schedule_params() -> dict:
    import typer.main

    from cli import app

    return {p.name: p for p in typer.main.get_group(app).commands["schedule"].params}


def test_schedule_cli_defaults_are_the_dataclasses():
    from tlm_probe.commands.options import cli_fields
    from tlm_probe.commands.schedule import ScheduleArch
    from tlm_probe.schedules.options import FromProbeOptions, ScheduleOptions
    from tlm_probe.schedules.rules import Rule

    params = _schedule_params()
    for cls in (ScheduleArch, ScheduleOptions, FromProbeOptions):
        for f in cli_fields(cls):
            assert params[f.name].default == f.default, f.name
    # one default each: the rounding is ScheduleSpec's, the rule's are Rule's
    assert params["multiple_of"].default == ScheduleSpec().multiple_of
    rule = Rule()
    assert [params[k].default for k in ("rule", "power", "min_ratio", "max_ratio", "monotone")] == [
        rule.transform, rule.power, rule.min_ratio, rule.max_ratio, rule.monotone]


def test_schedule_help_states_the_defaults_it_uses():
    """The architecture flags are None until derived (SCHEDULE_ARCH, or --from-probe): the help states the
    value in words, which must be the one used; the shape parameters' help is made from ScheduleSpec."""
    from tlm_probe.commands.schedule import CONFIG_NAMES, SCHEDULE_ARCH

    params = _schedule_params()
    names = {v: k for k, v in CONFIG_NAMES.items()}
    for key, value in SCHEDULE_ARCH.items():
        assert str(params[names.get(key, key)].show_default).split(";")[0] == str(value), key
    spec = ScheduleSpec()
    assert params["start"].show_default == f"{spec.start:g}; openelm: 0.5"
    assert params["end"].show_default == f"{spec.end:g}; openelm: 4"
    assert params["steepness"].show_default == f"{spec.steepness:g}"
    assert params["wide_factor"].show_default == f"{spec.wide_factor:g}"


def _one_line_error(args: list[str]) -> str:
    from typer.testing import CliRunner

    from cli import app

    r = CliRunner().invoke(app, ["schedule", *args])
    err = r.stderr.strip()
    assert r.exit_code == 1 and err.startswith("error: ") and "\n" not in err, (r.exit_code, r.output)
    return err


def test_schedule_defaults_and_openelm_own_defaults():
    import json

    from typer.testing import CliRunner

    from cli import app

    r = json.loads(CliRunner().invoke(app, ["schedule", "--json"]).stdout)
    assert (r["layers"], r["d_ff"], r["schedule"]["start"], r["schedule"]["end"]) == (24, 4096, 1.5, 0.5)
    r = json.loads(CliRunner().invoke(app, ["schedule", "--schedule", "openelm", "--json"]).stdout)
    assert (r["schedule"]["start"], r["schedule"]["end"]) == (0.5, 4.0)


@pytest.mark.parametrize("args, needle", [
    (["--layers", "1000000", "--component", "heads"],
     "--layers must be an integer in [1, 10000], got 1000000"),  # its stated range (tlm_probe/ranges.py)
    (["--layers", "0"], "--layers must be an integer in [1, 10000]"),
    (["--d-ff", str(10**18)], "--d-ff must be an integer in [1, 1048576]"),
    (["--d-model", "-64"], "--d-model must be an integer in [1, 1048576]"),
    (["--component", "mlpp"], "--component must be one of mlp, heads, kv, mem, got 'mlpp'"),
    (["--mixer", "rnn"], "unknown mixer 'rnn'"),
    (["--multiple-of", "0"], "--multiple-of must be an integer in [1, 1048576]"),
    (["--statistic", "align_mlp_mid"], "--statistic is read only with --from-probe"),
    (["--out", "x.json", "--model", "m"], "--model, --out are read only with --from-probe"),
])
def test_schedule_refuses_out_of_range_architecture_quickly(args, needle):
    import time

    t0 = time.perf_counter()
    assert needle in _one_line_error(args)
    assert time.perf_counter() - t0 < 10  # before: --layers 1000000 --component heads ran for minutes
