"""No network unless asked: while `tlm eval` works on a local model with local tasks and local data, the
Hugging Face libraries are put in offline mode. Without it they open connections even when every file is
local (datasets sends a HEAD request to S3 to count each load_dataset('json') of a built-in task). Only a
hub name the user gave (model, harness task or hf: source) may reach the network."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
# the libraries read those variables once, when imported: the module constants of any already imported
OFFLINE_CONSTANTS = (
    ("huggingface_hub.constants", "HF_HUB_OFFLINE"),
    ("datasets.config", "HF_HUB_OFFLINE"),
    ("datasets.config", "HF_DATASETS_OFFLINE"),
)


def is_local(model: str, tasks: list[str], sources: list[str], builtin: set[str]) -> bool:
    """The model is a file or folder, every task is built in or a file/folder, and no source is hf:."""
    local_tasks = all(t in builtin or Path(t).exists() for t in tasks)
    return Path(model).exists() and local_tasks and not any(s.startswith("hf:") for s in sources)


@contextlib.contextmanager
def offline(enabled: bool = True):
    """Offline mode of huggingface_hub, datasets and transformers for the block (nothing when not
    `enabled`); the environment and the modules' constants are restored afterwards."""
    if not enabled:
        yield
        return
    env = {k: os.environ.get(k) for k in OFFLINE_ENV}
    given = env["HF_HUB_OFFLINE"] or env["TRANSFORMERS_OFFLINE"] or ""
    was_offline = given.upper() in ("1", "ON", "YES", "TRUE")
    saved = {(m, a): getattr(sys.modules[m], a) for m, a in OFFLINE_CONSTANTS if m in sys.modules}
    os.environ.update({k: "1" for k in OFFLINE_ENV})
    for module, attr in saved:
        setattr(sys.modules[module], attr, True)
    try:
        yield
    finally:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for module, attr in OFFLINE_CONSTANTS:  # a module first imported inside gets the outside value
            if module in sys.modules:
                setattr(sys.modules[module], attr, saved.get((module, attr), was_offline))
