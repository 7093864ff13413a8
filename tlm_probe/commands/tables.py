"""Tables for logs: a printed table never cuts a number or a header. rich shrinks a table wider than the
console by cutting cells to `…` (at 80 columns, every log, `14,947,…` and `align_m…`); a table that does
not fit is printed instead as several, each with the key columns again and as many others as fit whole."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

PADDING = 2  # rich's default: one space either side of a cell
MIN_WIDTH = 40  # narrower consoles (or none) are treated as this wide


def table_width(widths: Sequence[int]) -> int:
    """The printed width of a boxed table with columns of these content widths (a border between and
    around the columns)."""
    return sum(w + PADDING for w in widths) + len(widths) + 1


def column_groups(widths: Sequence[int], keys: int, width: int) -> list[list[int]]:
    """Indices of the columns of each table: the first `keys` in every one, then the others in order, as
    many as fit in `width` (at least one per table)."""
    groups, current = [], []
    for i in range(keys, len(widths)):
        if current and table_width([widths[j] for j in [*range(keys), *current, i]]) > width:
            groups.append(current)
            current = []
        current.append(i)
    groups.append(current)
    return [[*range(keys), *g] for g in groups]


def fitted_tables(columns: Sequence[str], rows: Sequence[Sequence[str]], *, keys: int = 1, width: int = 80,
                  left: Sequence[str] = ()) -> list[Table]:
    """`rows` of cell strings as one table if it fits in `width`, else as several (see column_groups);
    `left`: the columns justified left (the rest right, as numbers are)."""
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    tables = []
    for group in column_groups(widths, keys, max(width, MIN_WIDTH)):
        t = Table()
        for i in group:  # fold, never "…": a cell too wide for any table wraps instead of losing digits
            t.add_column(columns[i], justify="left" if columns[i] in left else "right", min_width=widths[i],
                         overflow="fold")
        for r in rows:
            t.add_row(*(r[i] for i in group))
        tables.append(t)
    return tables


def print_fitted(console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], *,
                 keys: int = 1, left: Sequence[str] = ()) -> None:
    """The title as one line (never broken), then the table(s) fitted to the console's width."""
    console.print(title, markup=False, highlight=False, soft_wrap=True)
    for t in fitted_tables(columns, rows, keys=keys, width=console.width, left=left):
        console.print(t)
