"""Length bucketing: reorder sequences so that each batch holds sequences of similar length (less padding).

Text cut at document boundaries gives sequences of every length; batched in reading order, 9-14% of the
computed positions are padding. Sorting a window of `window` batches' worth of sequences by length and
cutting it into consecutive batches keeps memory bounded (window x batch_size sequences) and brings the
padding down to a few percent. The SET of sequences is unchanged, only their order: use it where the
result does not depend on order (sums over sequences, like the probe's streaming moments), not where a
random sample is drawn in reading order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

S = TypeVar("S", bound=Sequence)
WINDOW_BATCHES = 32
"""Batches' worth of sequences sorted together."""


def bucket_by_length(seqs: Iterable[S], batch_size: int, window: int = WINDOW_BATCHES) -> Iterator[S]:
    """The same sequences, longest first within each window of window*batch_size (a stable sort)."""
    size = max(1, batch_size) * max(1, window)
    buf: list[S] = []
    for s in seqs:
        buf.append(s)
        if len(buf) == size:
            yield from sorted(buf, key=len, reverse=True)
            buf = []
    yield from sorted(buf, key=len, reverse=True)


def padding_fraction(lengths: Iterable[int], batch_size: int) -> float:
    """Share of computed positions that are padding when `lengths` are batched in this order."""
    lengths = list(lengths)
    computed = sum(
        max(lengths[i : i + batch_size]) * len(lengths[i : i + batch_size])
        for i in range(0, len(lengths), batch_size)
    )
    return 1 - sum(lengths) / computed if computed else 0.0
