"""PlotOptions: what shapes one figure (its kind, statistics, axis, size, title, and the schedules figure's
budget). Kept apart from the drawing modules and matplotlib, so that the CLI builds `tlm plot`'s options
from it at start-up for free; figures.build_figure takes it. The figure size limits live here too: they
check a --size before anything is drawn, and style.new_figure checks every figure with the same ones."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias

from tlm_probe.errors import UserError
from tlm_probe.ranges import check_values
from tlm_probe.registry import Registry

FIGURES: Registry[Callable] = Registry("figure kind", {k: f"tlm_probe.plotting.figures:{k}_figure" for k in (
    "depth", "heatmap", "importance", "curves", "schedules", "sweep", "paired", "trajectory", "advantage",
    "diff", "trust")}, lazy=True)
"""Figure kind -> its builder (paths, options, notes) -> Figure, imported on use (no matplotlib here)."""
DEFAULT_SCHEDULES = ("uniform", "linear:1.5:0.5", "cosine:1.5:0.5", "sigmoid:1.5:0.5", "wider-early")
"""The schedules figure's curves when no --schedule is given."""
DEFAULT_SIZE = (1200, 800)
DEFAULT_DPI = 150
MIN_PIXELS, MAX_PIXELS = 200, 10_000
MIN_DPI, MAX_DPI = 10, 1200


def check_size(size: Sequence[int]) -> tuple[int, int]:
    width, height = (int(v) for v in size)
    for v in (width, height):
        if not MIN_PIXELS <= v <= MAX_PIXELS:
            raise UserError(f"figure size {width}x{height} px is out of range ({MIN_PIXELS}..{MAX_PIXELS})")
    return width, height


def check_dpi(dpi: int) -> int:
    if dpi < MIN_DPI or dpi > MAX_DPI:
        raise UserError(f"dpi must be between {MIN_DPI} and {MAX_DPI}, got {dpi}")
    return dpi


def parse_size(text: str) -> tuple[int, int]:
    """'1200x800' -> (1200, 800)."""
    try:
        w, h = text.lower().split("x")
        return check_size((int(w), int(h)))
    except ValueError as e:
        raise UserError(f"--size must look like 1200x800 (pixels), got {text!r}") from e


def size_text(size: str | Sequence[int]) -> str:
    """(1200, 800) -> '1200x800', the form --size takes (text is returned as it is)."""
    return size if isinstance(size, str) else "x".join(str(int(v)) for v in size)


if TYPE_CHECKING:  # a registry's keys are known at run time: to a type checker, a figure kind is any text
    FigureKind: TypeAlias = str
else:  # the closed choice the CLI offers and check_values enforces (ranges.literal_values)
    FigureKind = Literal[tuple(FIGURES)]


@dataclass(frozen=True, kw_only=True)
class PlotOptions:
    """Everything that shapes one figure besides its input folders. `tlm plot`'s figure options are
    generated from these fields (commands/options.py): one default and one help for the library and the
    CLI. A library caller may give the size as (width, height); it is held as the CLI's text. Checked when
    made: a bad kind, size or dpi is one UserError before anything is read."""

    kind: FigureKind = "depth"
    """Figure kind."""
    statistic: tuple[str, ...] = ()
    """Statistic to draw (repeat for one panel each: depth, importance; curves: train_loss, val_loss)."""
    x: Literal["depth", "layer"] = "depth"
    """x axis of a depth figure: depth (l/(L-1), overlays models of any depth) or layer."""
    size: str | tuple[int, int] = size_text(DEFAULT_SIZE)
    """Figure size in pixels, WIDTHxHEIGHT."""
    dpi: int = DEFAULT_DPI
    """Dots per inch (sets text size relative to the pixels)."""
    title: str | None = None
    """Replace the automatic title."""
    layers: int = 24
    """Schedules figure: number of layers L."""
    d_ff: int = 2816
    """Schedules figure: uniform MLP width."""
    schedule: tuple[str, ...] = DEFAULT_SCHEDULES
    """Schedules figure: a schedule spec (repeatable)."""
    multiple_of: int = 64
    """Schedules figure: width rounding multiple."""

    def __post_init__(self) -> None:
        check_values(self)
        for name in ("statistic", "schedule"):  # a library caller's list (or one name) held as a tuple
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))
        object.__setattr__(self, "size", size_text(self.size))  # a library caller's (width, height)
        parse_size(self.size)  # dpi: its range (ranges.py)

    @property
    def pixels(self) -> tuple[int, int]:
        """--size as (width, height)."""
        return parse_size(self.size)
