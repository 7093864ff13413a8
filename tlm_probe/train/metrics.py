"""metrics.jsonl: one JSON object per line, kind "train" or "eval"; appended and flushed line by line
(fileio.append_line: a full disk leaves no torn line). On resume, lines beyond the restored step (written
after the last checkpoint) are dropped first, and so is a torn last line left by a killed process."""

from __future__ import annotations

import json
from pathlib import Path

from tlm_probe.files.fileio import append_line, atomic_write_text
from tlm_probe.results import METRICS_FILE as FILE
from tlm_probe.results import metrics_lines


class MetricsLog:
    def __init__(self, run: Path, enabled: bool = True):
        self.path = run / FILE
        self.enabled = enabled

    def truncate_after(self, step: int) -> None:
        if not (self.enabled and self.path.is_file()):
            return
        keep = [text for text, rec in metrics_lines(self.path) if rec["step"] <= step]
        atomic_write_text(self.path, "".join(ln + "\n" for ln in keep))

    def write(self, record: dict) -> None:
        if self.enabled:
            append_line(self.path, json.dumps(record))

