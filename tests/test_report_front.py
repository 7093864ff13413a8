"""`tlm report` (issue 47): one colour per model on the whole page and no two models alike (two hashed names
that hash to one colour used to share it: SmolLM2 beside a cosine run with other numbers); a probe folder
given twice (itself, and inside a comparison or spelt another way) is one model, not two; the depth
statistics after the headline are small multiples, not one full-size figure each."""

from __future__ import annotations

import math

import pytest
from plotting_tables import result_table

from tlm_probe.plotting.colours import KNOWN, arm_style, distinct_colours
from tlm_probe.report.sections import PANELS_PER_FIGURE, build_document, probe_sections
from tlm_probe.results import ProbeResult

# pythia-70m and cosine:1.3:0.7 hash to the same colour (checked below, from plotting.colours)
CLASH = ("pythia-70m", "cosine:1.3:0.7")
NAMES = ("uniform", "cosine:1.5:0.5", *CLASH, "SmolLM2-135M-Instruct.Q4_1", "gpt2", "llama", "qwen")


def test_the_clash_is_real():
    assert arm_style(CLASH[0]).colour == arm_style(CLASH[1]).colour


def test_distinct_colours_no_two_alike_known_arms_keep_theirs_order_free():
    colours = distinct_colours(NAMES)
    assert len(set(colours.values())) == len(NAMES)
    assert colours["uniform"] == KNOWN["uniform"].colour
    assert colours["cosine:1.5:0.5"] == KNOWN["cosine"].colour
    assert distinct_colours(reversed(NAMES)) == colours
    assert distinct_colours([f"{n}-s{k}" for n in NAMES for k in range(2)]) == colours  # seeds share it


def _line_colours(fig) -> dict[str, str]:
    """legend label -> line colour over every panel of a figure (a label drawn twice must agree)."""
    out: dict[str, str] = {}
    for ax in fig.axes:
        for line in ax.lines:
            label = line.get_label()
            if not label.startswith("_"):
                assert out.setdefault(label, line.get_color()) == line.get_color(), label
    return out


def test_every_depth_figure_of_a_report_draws_each_model_in_one_distinct_colour():
    models = {n: (64,) * 4 for n in CLASH} | {"uniform": (64,) * 6}
    stats = ("align_mlp_mid", "align_mlp_pre", "norm_ratio_mlp", "block_influence", "mlp_influence",
             "attn_influence", "resid_norm_growth", "align_attn_pre", "align_abs_mlp_mid")
    pr = ProbeResult(result_table(models, stats=stats), None, {}, None)
    (depth,) = [s for s in probe_sections([pr], (900, 600), 60) if s.title == "Statistics vs depth"]
    figures = [b.make() for b in depth.blocks]
    assert len(figures) == 1 + math.ceil((len(stats) - 1) / PANELS_PER_FIGURE)  # headline + small multiples
    assert [sum(ax.get_visible() for ax in f.axes) for f in figures] == [1, 6, 2]
    seen = [_line_colours(f) for f in figures]
    assert all(s == seen[0] for s in seen)
    assert len(set(seen[0].values())) == 3


def test_a_probe_folder_given_twice_is_one_model(real_probe_dirs, monkeypatch):
    one = next(iter(real_probe_dirs.values()))
    monkeypatch.chdir(one.parent)
    doc = build_document([str(one), f"./{one.name}", str(one) + "/"])
    (overview,) = [b for s in doc.sections if s.title == "Probe results" for b in s.blocks]
    assert len(overview.frame) == 1 and "[" not in str(overview.frame.iloc[0, 0])


@pytest.fixture(autouse=True)
def _agg():
    import matplotlib

    matplotlib.use("Agg")
