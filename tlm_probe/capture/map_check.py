"""`--device-map FILE` against a local checkpoint, before anything loads (issue 49): the names of the
parameters come from the safetensors header (or the index of a sharded checkpoint), not from an empty copy of
the model, which took 11-14 s of imports to build. The loader still checks the map on the empty copy
(capture/loading.py): this check only refuses early what that one would refuse, with the same message
(capture/dispatch.py refuse_unplaced).

It refuses only when it can be sure: the header's names are the model's own names when at least one key of
the map places one of them (a checkpoint written without the base model's prefix, `h.0...` for
`transformer.h.0...`, shares no name with a map of the model's modules, and is left to the loader), or
when the map is empty. A tied output head stores no tensor of its own: it is added from the family's row
(capture/adapters.py) when the config ties the embeddings, as the empty copy lists it."""

from __future__ import annotations

from pathlib import Path

from tlm_probe.capture.adapters import known_adapter
from tlm_probe.capture.dispatch import parse_device_map, refuse_unplaced
from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import read_json
from tlm_probe.models.config_file import read_config_json
from tlm_probe.models.safetensors_header import read_safetensors_header

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
TIE_KEYS = ("tie_word_embeddings", "tie_embeddings")
"""Hugging Face's and our config's name for a tied output head (both default to tied)."""


def stored_names(folder: Path) -> list[str] | None:
    """The tensor names a checkpoint folder stores, in the order of its header; None when it has no
    safetensors (GGUF, pickle, a hub name: left to the loader) or its files cannot be read here (the
    loader says why, in its own words)."""
    try:
        if (folder / SINGLE).is_file():
            return list(read_safetensors_header(folder / SINGLE))
        if (folder / INDEX).is_file():
            weights = read_json(folder / INDEX).get("weight_map")
            return list(weights) if isinstance(weights, dict) else None
    except (UserError, AttributeError):
        return None
    return None


def _tied_head(folder: Path, names: list[str]) -> str | None:
    """The output head's weight name when the config ties it to the embedding and the header has no copy."""
    config = read_config_json(folder)
    row = known_adapter(config.get("model_type"))
    tied = next((config[k] for k in TIE_KEYS if k in config), True)
    head = getattr(row, "lm_head", None)
    name = f"{head}.weight" if head else None
    return name if tied is True and name and name not in names else None


def _rooted(folder: Path, names: list[str]) -> bool:
    """Whether the stored names are the model's own module paths: ours always are; a Hugging Face
    checkpoint's are when its blocks sit under a base model's prefix (`model.layers.0...`), and may not be
    when they sit at the top (GPT-2's `h.0...` loads into `transformer.h.0...`)."""
    model_type = read_config_json(folder).get("model_type")
    row = known_adapter(model_type)
    if model_type == "tlm" or row is None:
        return model_type == "tlm"
    return any(f".{row.layers}." in f".{n}" and not n.startswith(f"{row.layers}.") for n in names)


def _inside(key: str, name: str) -> bool:
    """Whether a map key is a path inside a stored name under either's prefix: `encoder` in a base model
    loaded from `bert.encoder.layer.0...`, `transformer.h.0` for a stored `h.0...`."""
    parts = key.split(".")
    return any(f".{'.'.join(parts[i:])}." in f".{name}." for i in range(len(parts)))


def _tops(names: list[str]) -> list[str]:
    return list(dict.fromkeys(n.split(".")[0] for n in names))


def check_map_before_loading(model: str, device_map: str) -> None:
    """Refuse a JSON --device-map that leaves a stored parameter of the local checkpoint `model` unplaced,
    from its safetensors header alone (no torch); anything this cannot judge is left to the loader."""
    folder = Path(model)
    if not device_map.endswith(".json") or not folder.is_dir():
        return
    mapping = parse_device_map(device_map)
    names = stored_names(folder)
    if not names or not isinstance(mapping, dict):
        return
    aligned = not mapping or any(n == k or n.startswith(f"{k}.") or k == "" for k in mapping for n in names)
    head = _tied_head(folder, names)
    names = [*names, head] if head else names
    if aligned:
        refuse_unplaced(mapping, names, _tops(names))
    elif _rooted(folder, names) and not any(_inside(k, n) for k in mapping for n in names):
        raise UserError(f"--device-map names {next(iter(mapping))!r}, which is no module of the model; "
                        f"its checkpoint's top-level modules: {', '.join(_tops(names))}")
