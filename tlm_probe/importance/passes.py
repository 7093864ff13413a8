"""Counting the importance pass's work: forwards and backwards, in units of one clean forward over the
same batches (rows forwarded / rows of the data), so the cost of each statistic can be read off."""

from __future__ import annotations


class PassCounter:
    def __init__(self, rows: int):
        self.rows = max(rows, 1)
        self.calls: dict[str, dict[str, int]] = {}

    def _add(self, part: str, what: str, rows: int) -> None:
        entry = self.calls.setdefault(part, {"forward_calls": 0, "forward_rows": 0, "backward_rows": 0})
        entry[what] += rows
        if what == "forward_rows":
            entry["forward_calls"] += 1

    def forward(self, part: str, rows: int) -> None:
        self._add(part, "forward_rows", rows)

    def backward(self, part: str, rows: int) -> None:
        self._add(part, "backward_rows", rows)

    def summary(self) -> dict:
        """part -> forward calls, forwards and backwards as multiples of one clean forward of the data."""
        out = {}
        for part, c in self.calls.items():
            out[part] = {
                "forward_calls": c["forward_calls"],
                "forwards": round(c["forward_rows"] / self.rows, 4),
                "backwards": round(c["backward_rows"] / self.rows, 4),
            }
        return out
