"""Text of a drawn figure, measured: every visible text's window extent (titles, axis and tick labels,
legend texts), whether each lies inside the figure, and which pairs overlap. Shared by the figure tests
that check nothing is cut at the edge or drawn over other text at the default size."""

from __future__ import annotations

import itertools

from matplotlib.backends.backend_agg import FigureCanvasAgg


def texts(fig) -> list[tuple[str, object]]:
    """(what, bbox in display pixels) of every visible non-empty text of the figure, after a draw."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    found = [("suptitle", fig._suptitle)] if fig._suptitle is not None else []
    for k, ax in enumerate(a for a in fig.axes if a.get_visible()):
        found += [(f"title {k}", ax.title), (f"ylabel {k}", ax.yaxis.label), (f"xlabel {k}", ax.xaxis.label)]
        found += [(f"xtick {k}.{j}", t) for j, t in enumerate(_drawn(ax.get_xticklabels(), ax.get_xlim(), 0))]
        found += [(f"ytick {k}.{j}", t) for j, t in enumerate(_drawn(ax.get_yticklabels(), ax.get_ylim(), 1))]
        legend = ax.get_legend()
        found += [(f"legend {k}: {t.get_text()}", t) for t in legend.get_texts()] if legend else []
    for legend in fig.legends:
        found += [(f"figure legend: {t.get_text()}", t) for t in [legend.get_title(), *legend.get_texts()]]
    return [(what, t.get_window_extent(renderer)) for what, t in found if t.get_visible() and t.get_text()]


def _drawn(labels, limits, axis: int) -> list:
    """The tick labels inside the axis' view (matplotlib keeps labels of ticks it does not draw)."""
    lo, hi = sorted(limits)
    return [t for t in labels if lo - 1e-9 <= t.get_position()[axis] <= hi + 1e-9]


def cut(fig) -> list[str]:
    """The texts that reach past the figure's edge (by more than half a pixel)."""
    width, height = fig.bbox.width, fig.bbox.height
    return [what for what, b in texts(fig)
            if b.x0 < -0.5 or b.y0 < -0.5 or b.x1 > width + 0.5 or b.y1 > height + 0.5]


def overlaps(fig, kinds: tuple[str, ...] = ("suptitle", "title", "ylabel", "xlabel", "xtick")) -> list:
    """Pairs of texts of `kinds` (prefixes of their names) whose boxes overlap."""
    boxes = [(w, b) for w, b in texts(fig) if w.startswith(kinds)]
    return [(a, b) for (a, ba), (b, bb) in itertools.combinations(boxes, 2) if ba.overlaps(bb)]


def covered(fig) -> list[str]:
    """For each axes legend: whether it reaches out of its axes, or covers a data point (a line's vertex,
    a scatter mark, a bar's top)."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    problems = []
    for k, ax in enumerate(fig.axes):
        legend = ax.get_legend()
        if legend is None:
            continue
        box, frame = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
        if box.x0 < frame.x0 - 0.5 or box.x1 > frame.x1 + 0.5 or box.y1 > frame.y1 + 0.5:
            problems.append(f"legend {k} reaches out of its axes")
        points = [line.get_xydata() for line in ax.lines if line.get_transform() == ax.transData]
        points += [c.get_offsets() for c in ax.collections if len(c.get_offsets())]
        points += [[(p.get_x() + p.get_width() / 2, p.get_y() + p.get_height())] for p in ax.patches]
        for xy in points:
            for x, y in ax.transData.transform(xy):
                if box.contains(x, y):
                    problems.append(f"legend {k} covers a point at ({x:.0f}, {y:.0f}) px")
    return problems
