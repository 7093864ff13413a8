"""metrics.jsonl: one JSON object per line, kind "train" or "eval"; appended and flushed line by line.
On resume, lines beyond the restored step (written after the last checkpoint) are dropped first."""

from __future__ import annotations

import json
from pathlib import Path

from tlm_probe.fileio import atomic_write_text
from tlm_probe.results import METRICS as FILE


class MetricsLog:
    def __init__(self, run: Path, enabled: bool = True):
        self.path = run / FILE
        self.enabled = enabled

    def truncate_after(self, step: int) -> None:
        if not (self.enabled and self.path.is_file()):
            return
        keep = [
            ln for ln in self.path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= step
        ]
        atomic_write_text(self.path, "".join(ln + "\n" for ln in keep))

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()

