"""Reading a received table (results.csv/.parquet, matrices, eval results, paired.csv), bounded (issue 36):
the one place tlm calls pandas' CSV and Parquet readers on a file from disk.

Bounds, checked before pandas allocates anything: a regular file of at most TABLE_MAX_BYTES
(files/bounded.py); for Parquet, whose pages are compressed, also what its footer declares: at most
TABLE_MAX_BYTES uncompressed and at most MAX_CELLS cells (rows x columns: a column of a billion nulls is a
few bytes on disk and 8 GB in memory). A CSV's cells are bounded by its size (each takes at least its
separator). Whatever pandas or pyarrow raise on a malformed file (they raise many types) is one UserError
naming the file."""

from __future__ import annotations

from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.files.bounded import checked_size

TABLE_MAX_BYTES = 256 * 2**20
"""The largest table file read (a probe of many models is a few megabytes)."""
MAX_CELLS = 64 * 2**20
"""The most cells (rows x columns) a Parquet table may declare (half a gigabyte of float64)."""
SUFFIXES = (".parquet", ".csv")
"""The table formats read, in the order a folder's copies are preferred."""
WHAT = "a table tlm reads"


def read_table_file(path: str | Path, **kwargs):
    """The DataFrame in the .csv or .parquet file `path`, within the bounds; `kwargs` go to pandas."""
    import pandas as pd

    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise UserError(f"{path} is not a table tlm reads (a .csv or .parquet file)")
    checked_size(path, TABLE_MAX_BYTES, WHAT)
    try:
        if path.suffix == ".parquet":
            _check_parquet_footer(path)
            return pd.read_parquet(path, **kwargs)
        return pd.read_csv(path, **kwargs)
    except UserError:
        raise
    except Exception as e:  # pandas/pyarrow raise many types (EmptyDataError, ParserError, ArrowInvalid, ...)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise UserError(f"cannot read {path}: {first}") from None


def numeric_columns(df, path: Path, columns) -> None:
    """Each of `columns` made numbers, in place (an empty cell is NaN); a word where a number belongs is one
    UserError naming the file, the column and the cell, not a NaN that fails later under another name."""
    import pandas as pd

    for col in columns:
        numbers = pd.to_numeric(df[col], errors="coerce")
        bad = df[col][numbers.isna() & df[col].notna()]
        if len(bad):
            raise UserError(f"{path}: column {col!r} holds a non-number ({bad.iloc[0]!r})")
        df[col] = numbers


def _check_parquet_footer(path: Path) -> None:
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    cells = meta.num_rows * meta.num_columns
    if cells > MAX_CELLS:
        raise UserError(f"{path} declares {meta.num_rows:,} rows x {meta.num_columns:,} columns, more than "
                        f"the {MAX_CELLS:,} cells allowed for {WHAT}")
    unpacked = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if unpacked > TABLE_MAX_BYTES:
        raise UserError(f"{path} declares {unpacked:,} bytes uncompressed, more than the {TABLE_MAX_BYTES:,} "
                        f"allowed for {WHAT}")
