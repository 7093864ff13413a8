"""Task configs whose data file is named relative to the config itself (what `tlm eval` writes into
OUT/tasks/, so an eval folder can be moved). lm-evaluation-harness resolves `dataset_kwargs.data_files`
against its working directory; before a run, such a config is copied into the run's task folder with
that file's absolute path, so `tlm eval --tasks MOVED/tasks/X.yaml` works from anywhere. Only a data file
that exists beside the config and not from the working directory is rewritten (a config that means the
working directory keeps its meaning), and only in a config without `include:` (its includes are relative
to where it lives)."""

from __future__ import annotations

import json
from pathlib import Path


def localise(paths: list[Path], folder: Path, loader) -> list[Path]:
    """Each task path, or its copy in folder/localised/ with beside-the-config data files made absolute."""
    return [_localised(p, folder / "localised", loader) if p.is_file() else p for p in paths]


def _localised(config: Path, dest: Path, loader) -> Path:
    import yaml

    text = config.read_text()
    try:
        doc = yaml.load(text, Loader=loader)
    except yaml.YAMLError:
        return config  # the harness reports it in its own words
    files = (doc.get("dataset_kwargs") or {}).get("data_files") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or "include" in doc:
        return config
    new = text
    for name in files.values():
        if not isinstance(name, str) or Path(name).is_absolute() or Path(name).exists():
            continue
        beside = config.parent / name
        if beside.is_file():
            new = new.replace(json.dumps(name), json.dumps(str(beside.resolve())))
    if new == text:
        return config
    dest.mkdir(parents=True, exist_ok=True)
    (dest / config.name).write_text(new)
    return dest / config.name
