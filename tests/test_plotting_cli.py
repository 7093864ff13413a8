"""`tlm plot` end to end: figure files of the requested size, --json, exit codes 1 (bad input, one line,
no traceback) and 2 (usage); training curves from run folders in the trainer's contract layout."""

from __future__ import annotations

import json

import pytest
from plotting_tables import png_size, svg_size_pt
from typer.testing import CliRunner

from cli import app

runner = CliRunner()


def test_schedules_figure_json_and_size(tmp_path):
    out = tmp_path / "widths.png"
    r = runner.invoke(app, ["plot", "--kind", "schedules", "--layers", "12", "--d-ff", "1024",
                            "--schedule", "uniform", "--schedule", "cosine:1.5:0.5", "--size", "640x400",
                            "--dpi", "80", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    meta = json.loads(r.stdout)
    assert meta["out"] == str(out) and meta["kind"] == "schedules" and "12,288" in meta["title"]
    assert png_size(out) == (640, 400)


def test_curves_and_depth_from_a_real_demo(real_demo_dir, tmp_path):
    out = tmp_path / "curves.svg"
    r = runner.invoke(app, ["plot", str(real_demo_dir), "--kind", "curves", "--size", "500x300",
                            "--dpi", "100", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert svg_size_pt(out) == pytest.approx((360, 216))
    assert "2 arm(s)" in json.loads(r.stdout)["title"] and "2 seeds" in json.loads(r.stdout)["title"]
    probes = sorted((real_demo_dir / "probe").iterdir())
    out = tmp_path / "depth.png"
    r = runner.invoke(app, ["plot", *map(str, probes), "--statistic", "mlp_influence", "--x", "layer",
                            "--size", "600x400", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert png_size(out) == (600, 400) and "cosine:1.5:0.5, 2 seeds" in json.loads(r.stdout)["title"]
    title = json.loads(r.stdout)["title"]
    r = runner.invoke(app, ["plot", str(real_demo_dir), "--statistic", "mlp_influence", "--x", "layer",
                            "--size", "600x400", "--out", str(out), "--json"])  # the demo: its probes
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["title"] == title


def test_plot_of_a_folder_without_probes_says_how_to_make_them(real_demo_dir, tmp_path):
    bare = tmp_path / "cmp"
    bare.mkdir()
    (bare / "compare.json").write_text((real_demo_dir / "compare.json").read_text())
    r = CliRunner().invoke(app, ["plot", str(bare), "--out", str(tmp_path / "f.png")])
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1, r.output
    assert "no probe results" in r.stderr and f"tlm probe {bare}/runs/NAME --out DIR" in r.stderr
    assert "or draw its training curves: --kind curves" in r.stderr  # what a folder of runs can draw
    run = real_demo_dir / "runs" / "uniform-s0"
    r = CliRunner().invoke(app, ["plot", str(run), "--out", str(tmp_path / "f.png")])
    assert r.exit_code == 1 and f"tlm probe {run} --out DIR; or draw its training curves" in r.stderr
    r = CliRunner().invoke(app, ["plot", str(run), "--kind", "curves", "--out", str(tmp_path / "f.png")])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(("args", "message"), [
    (["--kind", "schedules", "--out", "{tmp}/f.jpg"], "must end in one of .png, .pdf, .svg"),
    (["--kind", "bars", "--out", "{tmp}/f.png"], "--kind must be one of depth, heatmap"),
    (["{tmp}/missing", "--out", "{tmp}/f.png"], "input not found"),
    (["{tmp}", "--out", "{tmp}/f.png"], "is not a probe result"),
    (["--kind", "schedules", "--size", "big", "--out", "{tmp}/f.png"], "--size must look like"),
    (["--kind", "schedules", "--schedule", "cosine:x", "--out", "{tmp}/f.png"], "must be numbers"),
    (["--kind", "schedules", "--out", "{tmp}/no/f.png"], "output folder does not exist"),
])
def test_bad_input_is_one_line_and_exit_1(tmp_path, args, message):
    r = runner.invoke(app, ["plot", *[a.format(tmp=tmp_path) for a in args]])
    assert r.exit_code == 1, r.output
    assert message in r.stderr and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.png")) and not list(tmp_path.glob(".*"))  # nothing half-written


def test_usage_error_exit_2_and_help_has_example(tmp_path):
    assert runner.invoke(app, ["plot", "--kind", "schedules"]).exit_code == 2  # --out missing
    r = runner.invoke(app, ["plot", "--help"])
    assert r.exit_code == 0 and "Example: tlm plot" in r.stdout


def _params(name: str) -> dict:
    import typer.main

    return {p.name: p for p in typer.main.get_group(app).commands[name].params}


def test_plot_options_are_the_library_defaults_and_the_library_takes_them(tmp_path):
    """`tlm plot`'s figure options are PlotOptions' fields (issue 32): one default for CLI and library."""
    from tlm_probe.commands.options import cli_fields
    from tlm_probe.plotting.figures import build_figure
    from tlm_probe.plotting.options import DEFAULT_SCHEDULES, PlotOptions

    params = _params("plot")
    for f in cli_fields(PlotOptions):
        default = params[f.name].default
        assert (tuple(default) if isinstance(default, list) else default) == f.default, f.name
    assert params["schedule"].default == list(DEFAULT_SCHEDULES) and params["out"].required
    # a library caller's list, single name and (width, height) are held as the CLI gives them
    opts = PlotOptions(kind="schedules", statistic="val_loss", size=(640, 400), schedule=["uniform"])
    assert (opts.statistic, opts.size, opts.pixels, opts.schedule) == (
        ("val_loss",), "640x400", (640, 400), ("uniform",))
    fig = build_figure([], kind="schedules", size=(640, 400), dpi=80, layers=12, schedule=("uniform",))
    assert fig.get_size_inches() * fig.dpi == pytest.approx((640, 400))
    with pytest.raises(TypeError, match="not both"):
        build_figure([], opts, dpi=80)


@pytest.mark.parametrize(("fields", "message"), [
    ({"kind": "bars"}, "--kind must be one of depth, heatmap"),
    ({"size": "big"}, "--size must look like"),
    ({"size": (10, 10)}, "out of range"),
    ({"dpi": 5}, r"dpi must be an integer in \[10, 1200\]"),
])
def test_plot_options_refuse_bad_values_when_made(fields, message):
    from tlm_probe.errors import UserError
    from tlm_probe.plotting.options import PlotOptions

    with pytest.raises(UserError, match=message):
        PlotOptions(**fields)
