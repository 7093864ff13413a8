"""ReportOptions: what shapes a report page besides its inputs (title, figure size). Kept apart from the
report's builders and matplotlib, so that the CLI builds `tlm report`'s options from it at start-up for
free; sections.build_document takes it."""

from __future__ import annotations

from dataclasses import dataclass

from tlm_probe.plotting.options import parse_size, size_text
from tlm_probe.ranges import check_values


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    """Everything that shapes a report page besides its inputs. `tlm report`'s page options are generated
    from these fields (commands/options.py): one default and one help for the library and the CLI. A library
    caller may give the size as (width, height); it is held as the CLI's text. Checked when made: a bad size
    or dpi is one UserError before any input is read."""

    title: str = "tlm_probe report"
    """Page title."""
    size: str | tuple[int, int] = "1100x700"
    """Figure size in pixels, WIDTHxHEIGHT."""
    dpi: int = 110
    """Figure dots per inch."""

    def __post_init__(self):
        check_values(self)
        object.__setattr__(self, "size", size_text(self.size))  # a library caller's (width, height)
        parse_size(self.size)  # dpi: its range (ranges.py)

    @property
    def pixels(self) -> tuple[int, int]:
        """--size as (width, height)."""
        return parse_size(self.size)
