"""The option fields that the commands running a model on a corpus share, each declared once (its default,
its help; its type below): the options dataclasses of probe, diff, trust, eval, generate and train compose
them, `device: str = shared("device")`, instead of pasting them. Light (no torch): the CLI reads them."""

from __future__ import annotations

from dataclasses import MISSING, field
from typing import Any

from tlm_probe.capture.dispatch import DEVICE_MAP_HELP, MAX_MEMORY_HELP
from tlm_probe.capture.model_source import Dtype as Dtype  # Dtype, Split, Sample: re-exported Literals
from tlm_probe.data.sources import SPLIT_HELP
from tlm_probe.data.sources import Split as Split
from tlm_probe.data.windows import SAMPLE_HELP
from tlm_probe.data.windows import Sample as Sample
from tlm_probe.ranges import IN_MEMORY

FIELDS = {
    # not a closed set (cuda:N): checked once, where it is resolved (models/device.py)
    "device": ("auto", "auto (a GPU when there is one, else the CPU) | cpu | cuda | cuda:N | mps"),
    "dtype": ("float32", "Precision the model is loaded and run in."),
    "device_map": ("", DEVICE_MAP_HELP),
    "max_memory": ("", MAX_MEMORY_HELP),
    "data": ("builtin:pydoc", "builtin:pydoc | builtin:stdlib | builtin:env | text file/folder/glob | "
                              "file.jsonl[:field] | hf:NAME[:split] | token ids (.npy, .pt, .tok, folder)."),
    "split": ("auto", SPLIT_HELP),
    "sample": ("spread", SAMPLE_HELP),
    "max_tokens": (MISSING, "Stop after this many tokens (0: all the data)."),
    "batch_size": (8, "Sequences per forward pass."),
}
"""Field name -> (its default, its help)."""
CORPORA = ("data",)
"""The shared fields a library call may also fill with a corpus in memory (texts, an array of ids)."""


def shared(name: str, default=MISSING, *, before: str = "") -> Any:
    """The dataclass field `name` as FIELDS declares it (`default`: a command's own; `before`: words that
    say what the option applies to, put before the help)."""
    value, doc = FIELDS[name]
    memory = {IN_MEMORY: True} if name in CORPORA else {}
    return field(default=value if default is MISSING else default, metadata={"help": before + doc, **memory})
