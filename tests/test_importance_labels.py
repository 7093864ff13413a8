"""The importance figure with three model depths (one row of panels per depth): no text runs into other text.

Before: every panel's y label (the statistic's readable name, ~35 characters) was taller than its panel,
so the labels of a column ran into each other and the top one into the title; twelve layer ticks ran
together ("1011"). Checked on the drawn figure: the window extents of every visible label, title and tick
label, pairwise. (Every case here had overlaps before: 11 to 129 pairs.)"""

from __future__ import annotations

import itertools

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from plotting_tables import result_table

from tlm_probe.plotting.importance import plot_importance

DEPTHS = {"uniform": (256,) * 12, "cosine:1.5:0.5": (320,) * 6, "smollm2": (100,) * 4}
STATS = ["block_influence", "mlp_influence", "logit_lens_kl", "ablation_dnll_mlp_zero", "taylor_mlp"]


def _texts(fig):
    """(what, bbox) of every visible non-empty text drawn: the title, panel titles, axis and tick labels."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    texts = [("suptitle", fig._suptitle)]
    for k, ax in enumerate(a for a in fig.axes if a.get_visible()):
        texts += [(f"title {k}", ax.title), (f"ylabel {k}", ax.yaxis.label), (f"xlabel {k}", ax.xaxis.label)]
        texts += [(f"xtick {k}.{j}", t) for j, t in enumerate(ax.get_xticklabels())]
    return [(what, t.get_window_extent(renderer)) for what, t in texts if t.get_visible() and t.get_text()]


def _overlaps(fig) -> list[tuple[str, str]]:
    boxes = _texts(fig)
    return [(a, b) for (a, ba), (b, bb) in itertools.combinations(boxes, 2) if ba.overlaps(bb)]


# (statistics, size, dpi): `tlm plot`'s default size and dpi; the report's (1100x700 at 110) with its six
# default proxies
CASES = [(3, (1200, 800), 150), (5, (1200, 800), 150), (3, (900, 700), 150), (6, (1100, 700), 110)]


@pytest.mark.parametrize("n_stats, size, dpi", CASES)
def test_three_depths_no_text_overlaps(n_stats, size, dpi):
    df = result_table(DEPTHS, stats=STATS + ["fisher_mlp"])
    fig = plot_importance(df, (STATS + ["fisher_mlp"])[:n_stats], size=size, dpi=dpi)
    assert _overlaps(fig) == []
    width, height = (round(v * dpi) for v in fig.get_size_inches())
    # the asked size, taller only where the rows' text needs it (15 panels at 1200x800 and 150 dpi)
    assert width == size[0] and (height == size[1] if n_stats == 3 else height >= size[1])
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 3 * n_stats and all("cos" in ax.get_ylabel() for ax in panels[::n_stats])


def test_one_depth_keeps_its_layout():
    fig = plot_importance(result_table({"uniform": (256,) * 12}, stats=STATS), STATS[:3])
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == STATS[:3]
    assert [ax.get_ylabel() for ax in panels][0] == "1 − cos(resid_pre, resid_post)"  # one line: it fits
    assert _overlaps(fig) == []
