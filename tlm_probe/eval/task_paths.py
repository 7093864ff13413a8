"""Task configs whose data file is named relative to the config itself (what `tlm eval` writes into
OUT/tasks/, so an eval folder can be moved). lm-evaluation-harness resolves `dataset_kwargs.data_files`
against its working directory; before a run, such a config is copied into the run's task folder with
that file's absolute path, so `tlm eval --tasks MOVED/tasks/X.yaml` works from anywhere. Only a data file
that exists beside the config and not from the working directory is rewritten (a config that means the
working directory keeps its meaning), and only in a config without `include:` (its includes are relative
to where it lives). The name is replaced where it is written (plain or quoted, a single name, a list or a
split -> name mapping), so what `tlm eval` checks before the run (eval/task_code.py) is what runs."""

from __future__ import annotations

import json
from pathlib import Path


def localise(paths: list[Path], folder: Path, loader) -> list[Path]:
    """Each task path, or its copy in folder/localised/ with beside-the-config data files made absolute."""
    return [_localised(p, folder / "localised", loader) if p.is_file() else p for p in paths]


def _localised(config: Path, dest: Path, loader) -> Path:
    import yaml

    from tlm_probe.eval.task_code import data_file_nodes

    text = config.read_text()  # checked before (eval/task_code.py): a regular file of bounded size
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.YAMLError:
        return config  # the harness reports it in its own words
    if not isinstance(root, yaml.MappingNode):
        return config
    top = {k.value: v for k, v in root.value if isinstance(k, yaml.ScalarNode)}
    if "include" in top or not isinstance(top.get("dataset_kwargs"), yaml.MappingNode):
        return config
    spans = []  # each data file named beside the config, as written (plain or quoted): its absolute path
    for _split, node in data_file_nodes(top["dataset_kwargs"]):
        name = node.value
        if node.style not in (None, "'", '"') or Path(name).is_absolute() or Path(name).exists():
            continue
        beside = config.parent / name
        if beside.is_file():
            spans.append((node.start_mark.index, node.end_mark.index, json.dumps(str(beside.resolve()))))
    if not spans:
        return config
    new = text
    for start, end, value in sorted(spans, reverse=True):
        new = new[:start] + value + new[end:]
    dest.mkdir(parents=True, exist_ok=True)
    (dest / config.name).write_text(new)
    return dest / config.name
