"""How a grid of small bar panels fits its figure (the importance figure: one row of panels per model depth).

With three model depths the panels are short: full y labels (a statistic's readable name, ~35 characters)
ran into the panels above and below and into the title, titles into the neighbours' labels, and twelve
layer ticks into each other ("1011"). PanelFit picks the columns and the font size, wraps y labels to
the panel's height, breaks a title that is wider than its panel, and thins the ticks. Sizes are measured
with the house font (matplotlib's TextToPath: no renderer needed), inside plotting.style.figure_style.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence

import matplotlib as mpl
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath

FONTS = ("small", "x-small")  # the text of panels, tried in this order: the smaller one for dense grids
LABEL_SHARE = 0.6  # of a panel row's height, what its y label may take (the rest: title, ticks, gaps)
CHAR_WIDTH = 0.6  # a character's average advance, in units of the font size (DejaVu Sans)
TITLE_SHARE = 0.95  # of a panel's axes width, what a one-line title may take
PANEL_ASPECT = 1.4  # width / height a panel is laid out nearest to when several depths need rows
MIN_ROW = 10.0  # the least height of a row of panels, in font sizes: title, a y label of <= 3 lines, ticks
FRAME = 8.0  # the figure's title and legend, in font sizes
SINGLE_DEPTH_COLUMNS = 3


def text_pt(text: str, size: str | float) -> float:
    """The width in points of one line of `text` at font size `size`."""
    return TextToPath().get_text_width_height_descent(text, FontProperties(size=size), ismath=False)[0]


def _size_pt(size: str | float) -> float:
    return FontProperties(size=size).get_size_in_points()


class PanelFit:
    """Columns, font and text fitting for `len(statistics)` panels per depth, `n_depths` rows of them, in a
    figure of `size` pixels at `dpi`. `self.size` is that size, made taller where the rows would be too
    short for their text (every row gets MIN_ROW font sizes): a taller figure, rather than text drawn over
    text. Build it inside plotting.style.figure_style (the fonts are the house's)."""

    def __init__(self, size: Sequence[int], dpi: int, statistics: Sequence[str], n_depths: int):
        self.width_pt, self.height_pt = (v / dpi * 72 for v in size)
        self.n_stats, self.n_depths = len(statistics), n_depths
        self.cols, self.font = self._layout(statistics)
        self.rows = math.ceil(self.n_stats / self.cols) * n_depths
        needed_pt = self.rows * MIN_ROW * _size_pt(self.font) + FRAME * _size_pt("medium")
        self.height_pt = max(self.height_pt, needed_pt)
        self.size = (int(size[0]), max(int(size[1]), math.ceil(needed_pt / 72 * dpi)))
        self.tick_font = mpl.rcParams["xtick.labelsize"] if self.font == FONTS[0] else self.font
        font_pt = _size_pt(self.font)
        self.label_chars = max(8, int(LABEL_SHARE * self.height_pt / self.rows / (CHAR_WIDTH * font_pt)))
        self.panel_pt = self.width_pt / self.cols - self._y_allowance(self.font)  # the axes' own width

    def _layout(self, statistics: Sequence[str]) -> tuple[int, str]:
        """At most as many columns as fit a title's widest word (a statistic's name cannot be broken)
        beside the y label and ticks; three for one depth; for several, the count whose panels come
        nearest PANEL_ASPECT, in the first font of FONTS that lets it fit."""
        for font in FONTS:
            fitting = max(1, int(self.width_pt // (max(text_pt(s, font) for s in statistics)
                                                   + self._y_allowance(font))))
            wanted = min(self.n_stats, SINGLE_DEPTH_COLUMNS) if self.n_depths == 1 else self._aspect_best()
            if wanted <= fitting or font == FONTS[-1]:
                return min(wanted, fitting), font
        raise AssertionError("unreachable")

    def _aspect_best(self) -> int:
        def badness(cols: int) -> float:
            rows = math.ceil(self.n_stats / cols) * self.n_depths
            return abs(math.log((self.width_pt / cols) / (self.height_pt / rows) / PANEL_ASPECT))

        return min(range(1, self.n_stats + 1), key=badness)

    @staticmethod
    def _y_allowance(font: str) -> float:
        """What a panel gives up left of its axes: a y label of up to three lines, tick labels, gaps."""
        tick = mpl.rcParams["ytick.labelsize"] if font == FONTS[0] else font
        return 5.0 * _size_pt(font) + text_pt("−0.00", tick)

    def title(self, text: str) -> str:
        """'stat · 12 layers' on two lines where one is wider than the panel."""
        fits = text_pt(text, self.font) <= TITLE_SHARE * self.panel_pt
        return text if fits else text.replace(" · ", "\n", 1)

    def label(self, text: str) -> str:
        """`text` wrapped onto lines no longer than the panel is high (it reads along the y axis)."""
        if len(text) <= self.label_chars:
            return text
        lines = textwrap.wrap(text, self.label_chars, break_long_words=False, break_on_hyphens=False)
        return "\n".join(lines)

    def tick_step(self, n: int) -> int:
        """Every how many layers a tick label goes, so that the labels of n layers never touch."""
        tick_pt = text_pt("0" * len(str(n - 1)), self.tick_font) + CHAR_WIDTH * _size_pt(self.tick_font) * 1.5
        return max(1, math.ceil(n / max(1, int(self.panel_pt / tick_pt))))
