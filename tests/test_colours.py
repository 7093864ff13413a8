"""One model, one look, everywhere (issue 35, item 2): an arm's colour, line style and marker are a function
of its name alone, so they agree between figures with different other members, between `tlm demo`'s
figures, every `tlm plot` kind and a report; uniform and the cosine taper differ in colour and in line
style or marker; seeds of an arm share its hue; the known arms stay apart in greyscale.

The looks are read back from the matplotlib artists (Line2D, bar patches) of figures built by the real
plotting functions, never from pixels."""

from __future__ import annotations

import colorsys
import itertools
import os
import subprocess
import sys

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest

from tlm_probe.plotting import plot_curves, plot_depth, plot_importance, plot_schedules
from tlm_probe.plotting.colours import (
    HASHED_MARKERS,
    KNOWN,
    MIN_GREY_STEP,
    arm_of,
    arm_style,
    known_shape,
    luminance,
)
from tlm_probe.plotting.trajectory import plot_trajectory

STAT = "block_influence"
COSINE, UNIFORM = "cosine:1.5:0.5", "uniform"


def _table(models, n_layers: int = 4, seed: int = 0, stats=(STAT,)) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for model in models:
        for l in range(n_layers):
            for s in stats:
                v = float(rng.uniform(0.1, 0.9))
                rows.append(dict(model=model, layer=l, depth=l / (n_layers - 1), statistic=s, value=v,
                                 ci_low=v - 0.05, ci_high=v + 0.05, n_tokens=1000, d_ff=64))
    return pd.DataFrame(rows)


def _curves(arms) -> pd.DataFrame:
    return pd.DataFrame([dict(arm=a, metric=m, tokens=t, mean=1.0 + k, std=0.0, n_seeds=1)
                         for k, a in enumerate(arms) for m in ("train_loss", "val_loss")
                         for t in (10, 20, 30)])


def _rgb(colour) -> tuple:
    return tuple(np.round(mcolors.to_rgb(colour), 6))


def _looks(fig) -> dict[str, tuple]:
    """Legend label -> (colour, line style, marker) of every labelled line of the figure."""
    out = {}
    for ax in fig.axes:
        for line in ax.lines:
            label = line.get_label().strip()
            if not label.startswith("_"):
                out[label] = (_rgb(line.get_color()), line.get_linestyle(), line.get_marker())
    return out


def _bar_colours(fig) -> dict[str, tuple]:
    """Entry -> face colour of its bars (importance figures tag them gid='bars:<entry>')."""
    return {str(p.get_gid())[len("bars:"):]: _rgb(p.get_facecolor())
            for ax in fig.axes for p in ax.patches if str(p.get_gid()).startswith("bars:")}


def test_the_same_name_looks_the_same_whatever_else_the_figure_holds():
    small = [UNIFORM, COSINE]
    crowded = ["HuggingFaceTB/SmolLM2-135M", "linear", COSINE, "hourglass", "zz-other", "cosine:0.5:1.5"]
    for draw in (lambda ms: plot_depth(_table(ms), STAT), lambda ms: plot_curves(_curves(ms)),
                 lambda ms: plot_depth(_table(list(reversed(ms))), STAT, x="layer")):
        a, b = _looks(draw(small)), _looks(draw(crowded))
        assert a[COSINE] == b[COSINE]
        assert a[COSINE] == (_rgb(arm_style(COSINE).colour), "--", arm_style(COSINE).marker)
    # a depth figure (probe models named after their runs) and the loss curves (arms) agree
    depth = _looks(plot_depth(_table([f"{COSINE}-s0", "SmolLM2-135M"]), STAT))
    curves = _looks(plot_curves(_curves([COSINE, UNIFORM, "linear"])))
    assert depth[f"{COSINE}-s0"] == curves[COSINE]
    # importance bars and the schedules figure use the same colours
    bars_a = _bar_colours(plot_importance(_table(small), [STAT]))
    bars_b = _bar_colours(plot_importance(_table(crowded[:3]), [STAT]))
    assert bars_a[COSINE] == bars_b[COSINE] == curves[COSINE][0] and bars_a[UNIFORM] == curves[UNIFORM][0]
    widths = pd.DataFrame([dict(schedule=s, layer=l, width=64) for s in ("linear", COSINE) for l in range(4)])
    assert _looks(plot_schedules(widths, 64))[COSINE] == curves[COSINE]


def test_uniform_and_cosine_differ_in_colour_and_in_line_style_or_marker():
    looks = _looks(plot_depth(_table([UNIFORM, COSINE]), STAT))
    (c_u, ls_u, m_u), (c_c, ls_c, m_c) = looks[UNIFORM], looks[COSINE]
    assert c_u != c_c
    assert ls_u != ls_c or m_u != m_c
    # the report's old clash: a pretrained model in orange next to the cosine arm in vermillion; now the
    # cosine arm is blue, a colour no hashed name gets (nor uniform's black)
    assert arm_style(COSINE).colour.upper() == "#0072B2"
    pretrained = ("HuggingFaceTB/SmolLM2-135M", "gpt2", "Qwen/Qwen2.5-0.5B")
    for name in (*pretrained, *(f"model-{k}" for k in range(50))):
        hashed = arm_style(name)
        assert hashed.marker in HASHED_MARKERS and hashed.colour not in (KNOWN["cosine"].colour, "#000000")


def _hue(colour) -> float:
    return colorsys.rgb_to_hsv(*mcolors.to_rgb(colour))[0]


def test_seeds_of_an_arm_share_a_hue():
    names = [f"{COSINE}-s0", f"{COSINE}-s1", f"{COSINE}-s2", "uniform-s0", "uniform-s1"]
    ax = plot_depth(_table(names), STAT).axes[0]
    seeds = {line.get_gid()[len("seed:"):]: line for line in ax.lines
             if str(line.get_gid()).startswith("seed:")}
    mean = {line.get_label(): line for line in ax.lines if not line.get_label().startswith("_")}
    cos = [seeds[n] for n in names[:3]]
    assert len({round(_hue(line.get_color()), 6) for line in cos}) == 1
    assert _hue(cos[0].get_color()) == pytest.approx(_hue(mean[f"{COSINE} (mean of 3 seeds)"].get_color()))
    # one seed alone in a figure looks like its arm, whichever seed it is
    one = _looks(plot_depth(_table([f"{COSINE}-s1"]), STAT))[f"{COSINE}-s1"]
    other = _looks(plot_depth(_table([f"{COSINE}-s0", "linear"]), STAT))[f"{COSINE}-s0"]
    assert _hue(one[0]) == pytest.approx(_hue(other[0])) and one[1:] == other[1:]


def test_known_arms_stay_apart_in_greyscale():
    looks = {name: arm_style(name) for name in KNOWN}
    assert len({s.colour.upper() for s in looks.values()}) == len(looks)  # one colour per known arm
    assert len({s.marker for s in looks.values()}) == len(looks)
    for (a, sa), (b, sb) in itertools.combinations(looks.items(), 2):
        grey_step = abs(luminance(sa.colour) - luminance(sb.colour))
        assert grey_step >= MIN_GREY_STEP or sa.linestyle != sb.linestyle, (a, b, grey_step)
    # the same holds for the lines drawn: a figure of every known arm, read back
    fig = plot_depth(_table(list(KNOWN)), STAT)
    lines = {line.get_label(): line for line in fig.axes[0].lines if not line.get_label().startswith("_")}
    for a, b in itertools.combinations(KNOWN, 2):
        la, lb = lines[a], lines[b]
        dashes = (la._unscaled_dash_pattern, lb._unscaled_dash_pattern)  # '--' also stands for custom dashes
        apart = abs(luminance(la.get_color()) - luminance(lb.get_color())) >= MIN_GREY_STEP
        assert apart or la.get_linestyle() != lb.get_linestyle() or dashes[0] != dashes[1], (a, b)


def test_spellings_of_one_arm_and_hashed_names():
    assert {arm_style(n) for n in ("cosine", COSINE, "cosine:1.5", "cosine_1.5_0.5", f"{COSINE}-s3")} == {
        KNOWN["cosine"]}
    for name in ("probe-derived.json", "results/probe-derived.json", "results_probe-derived.json-s0",
                 "probe-derived", "probe-derived-s1"):
        assert known_shape(arm_of(name)) == "probe-derived", name
        assert arm_style(name) == KNOWN["probe-derived"], name
    assert arm_style("openelm:0.5:4") == KNOWN["openelm"] and arm_style("middle:0.7") == KNOWN["middle"]
    # other numbers are another arm: hashed, with a marker no known arm has
    for name in ("cosine:0.5:1.5", "mamba-cosine:1.5:0.5", "SmolLM2-135M", "other.json"):
        style = arm_style(name)
        assert not style.known and style.marker in HASHED_MARKERS, name
    # the hash is MD5, not Python's salted hash(): the same look in another process
    code = ("from tlm_probe.plotting.colours import arm_style; s = arm_style('SmolLM2-135M'); "
            "print(s.colour, s.marker, s.linestyle)")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    style = arm_style("SmolLM2-135M")
    assert out.stdout.split() == [style.colour, style.marker, str(style.linestyle)], out.stderr


def test_trajectory_panels_keep_their_arms_line_style_and_marker():
    rows = pd.concat([_table([UNIFORM, COSINE], seed=k).assign(step=step) for k, step in enumerate((10, 20))])
    fig = plot_trajectory(rows, STAT)
    panels = {ax.get_title(): ax for ax in fig.axes if ax.lines}
    for name in (UNIFORM, COSINE):
        style = arm_style(name)
        assert {(ln.get_linestyle(), ln.get_marker()) for ln in panels[name].lines} == {
            ("-" if style.linestyle == "-" else "--", style.marker)}


def test_a_demo_its_plots_and_its_report_draw_each_arm_alike(real_demo_dir, monkeypatch):
    """The demo's loss curves, `tlm plot` curves/advantage/depth/importance of the demo folder and the
    report's figures: each arm in one colour (and the lines in one style and marker) throughout."""
    from tlm_probe.plotting import style as style_module
    from tlm_probe.plotting.figures import build_figure
    from tlm_probe.report.html import FigureBlock
    from tlm_probe.report.sections import build_document
    from tlm_probe.workflows import demo

    figures = {}
    monkeypatch.setattr(style_module, "save_figure", lambda fig, path: figures.setdefault("demo", fig))
    demo._curves(real_demo_dir)
    probes = sorted(str(p) for p in (real_demo_dir / "probe").iterdir())
    figures["curves"] = build_figure([real_demo_dir], kind="curves")
    figures["advantage"] = build_figure([real_demo_dir], kind="advantage")
    figures["depth"] = build_figure(probes, kind="depth")
    document = build_document([real_demo_dir], size=(400, 300), dpi=50)
    blocks = [b for s in document.sections for b in s.blocks if isinstance(b, FigureBlock)]
    blocks += [b for b in document.summary if isinstance(b, FigureBlock)]
    for block in blocks:
        figures[f"report:{block.name}"] = block.make()
    seen: dict[str, set] = {}
    for fig in figures.values():
        for label, look in _looks(fig).items():
            arm = label.split(" (mean of")[0]
            if arm in (UNIFORM, COSINE):
                seen.setdefault(arm, set()).add(look)
        for entry, colour in _bar_colours(fig).items():
            if entry in (UNIFORM, COSINE):
                seen.setdefault(entry, set()).add((colour,))
    assert set(seen) == {UNIFORM, COSINE}
    for arm, looks in seen.items():
        style = arm_style(arm)
        assert {look[0] for look in looks} == {_rgb(style.colour)}, (arm, looks)
        assert {look[1:] for look in looks if len(look) > 1} == {
            ("-" if style.linestyle == "-" else "--", style.marker)}, (arm, looks)
    assert any(name.startswith("report:") and _bar_colours(f) for name, f in figures.items())
