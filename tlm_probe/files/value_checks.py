"""The checks of what a file tlm wrote holds once read (issue 49), declared once for every reader of tlm's
own folders (diff, trust: plotting/folder_checks.py; probe, compare: result_checks.py): types, ranges,
finiteness and row counts, each failure one UserError naming the file and the field or the column and row.
The bounded readers (files/) bound the bytes; these bound what the bytes say, so that a NaN, a word where a
number belongs, a layer at 10**6 or -1, or a million rows is refused instead of drawn, crashed on or
allocated."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from tlm_probe.errors import UserError

if TYPE_CHECKING:  # pandas is not imported here: JSON fields are checked before `tlm plot` imports it
    import pandas as pd

MAX_PLOTTED_LAYERS = 4096
"""The most layers a model diffed or probed may have (the deepest released models have ~100)."""
MAX_STATISTICS = 256
"""The most statistics one folder may hold rows of (the catalogue holds a few dozen)."""


def bad(where: Path | str, field: str, what: str, got) -> UserError:
    return UserError(f"{where}: {field} must be {what} (found {str(got)[:60]!r}); not a file tlm wrote, "
                     "or one edited since")


def is_int(v, lo: int, hi: int) -> bool:
    """An integer (not a bool) in [lo, hi)."""
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v < hi


def is_num(v, lo: float = -math.inf, hi: float = math.inf, none: bool = True) -> bool:
    """A finite number in [lo, hi] (None too, where `none`)."""
    if v is None:
        return none
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi


def need(ok: bool, where, field: str, what: str, got) -> None:
    if not ok:
        raise bad(where, field, what, got)


def need_list(v, n: int, each, where, field: str, what: str) -> None:
    """A list of exactly n items, each passing `each`."""
    need(isinstance(v, list) and len(v) == n, where, field, f"a list of {n}", v)
    for i, x in enumerate(v):
        need(each(x), where, f"{field}[{i}]", what, x)


def max_rows(df: pd.DataFrame, limit: int, where: Path) -> None:
    if len(df) > limit:
        raise UserError(f"{where} holds {len(df):,} rows, more than the {limit:,} tlm writes there: not a "
                        "file tlm wrote")


def column_in(df: pd.DataFrame, col: str, lo: float, hi: float, where: Path, integer: bool = False,
              nan: bool = True) -> None:
    """Every value of `col` finite (or empty where `nan`), in [lo, hi], and whole where `integer`."""
    x = df[col].astype(float)
    ok = x.between(lo, hi) & (x.abs() < math.inf) & (x.round() == x if integer else True)
    wrong = ~ok & ~(x.isna() if nan else False)
    if wrong.any():
        what = f"{'an integer' if integer else 'a finite number'} in {_shown(lo)}..{_shown(hi)}"
        row = int(wrong.idxmax()) + 2  # the file's line (a header, then rows; the index is the row's)
        raise bad(where, f"column {col!r} (row {row})", what, df[col][wrong].iloc[0])


def one_row_each(df: pd.DataFrame, keys: list[str], where: Path) -> None:
    """No two rows share `keys` (tlm writes each once): an extra row is refused, naming the first."""
    twice = df.duplicated(keys)
    if twice.any():
        row = df[twice].iloc[0]
        raise bad(where, f"the rows (row {int(twice.to_numpy().argmax()) + 2})",
                  f"one per {', '.join(keys)}", ", ".join(str(row[k]) for k in keys))


def _shown(bound: float) -> str:
    """A bound as a reader writes it: whole numbers with thousands separators (1,099,511,627,776)."""
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"
