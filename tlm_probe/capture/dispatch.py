"""Models larger than one device: transformers' own `device_map` dispatch (accelerate underneath) places
each block on a GPU, the CPU or disk, within `max_memory`, and moves every block's weights in just before
it runs. The probe's hooks see the same module outputs as on one device, so the statistics are the same
numbers; the inputs go to the device of the first block. Parsing and checking the two options lives here;
the loaders (capture/loading.py) pass the result to `from_pretrained`.
"""

from __future__ import annotations

import atexit
import logging
import re
import shutil
import tempfile
from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import read_json

DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
DEVICE_MAP_HELP = ("Dispatch a model larger than one device over GPUs, the CPU and disk (transformers' "
                   "device_map): auto | balanced | balanced_low_0 | sequential | a JSON file "
                   "{module: device}; empty: one device.")
MAX_MEMORY_HELP = ("With --device-map: the most each device may hold, DEVICE=SIZE,... "
                   "(e.g. cpu=200MB,0=10GiB); the blocks that do not fit are offloaded to disk.")
"""The help of --device-map and --max-memory, for every command that loads a model (probe, eval,
generate)."""
UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def _parse_bytes(text: str, where: str) -> int:
    m = _SIZE.match(text)
    if not m or (m.group(2).upper() not in UNITS and m.group(2)):
        raise UserError(f"{where}: {text!r} is not a size (e.g. 200MB, 1.5GiB, 4096)")
    return int(float(m.group(1)) * UNITS[m.group(2).upper() or "B"])


def parse_max_memory(spec: str) -> dict | None:
    """'cpu=200MB,0=10GiB' -> {'cpu': 200000000, 0: 10737418240}; '' -> None (no cap)."""
    if not spec:
        return None
    out: dict = {}
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        key, sep, size = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--max-memory: {item!r} is not DEVICE=SIZE (e.g. cpu=200MB,0=10GiB)")
        key = key.strip()
        out[int(key) if key.isdigit() else key] = _parse_bytes(size, f"--max-memory {key}")
    return out


def parse_device_map(spec: str):
    """auto | balanced | balanced_low_0 | sequential, or a JSON file {module name: device}."""
    if spec in DEVICE_MAPS:
        return spec
    path = Path(spec)
    if path.suffix == ".json":
        if not path.is_file():
            raise UserError(f"--device-map {spec}: no such file")
        try:
            doc = read_json(path)  # bounded: size, nesting depth, UTF-8
        except UserError as e:
            raise UserError(f"--device-map {spec} is not a JSON object of module -> device: {e}") from None
        if not isinstance(doc, dict) or not all(isinstance(v, str | int) for v in doc.values()):
            raise UserError(f"--device-map {spec} must map module names to devices (cpu, disk, 0, cuda:1)")
        return doc
    raise UserError(f"--device-map must be one of {', '.join(DEVICE_MAPS)} or a .json file, got {spec!r}")


def check_dispatch_options(device_map: str, max_memory: str) -> None:
    """Both options read as they will be at load time, when the options are made (before the data or the
    model: a typo was once refused after 13-21 s of loading; issue 49)."""
    if max_memory and not device_map:
        raise UserError("--max-memory caps a dispatch: give --device-map too (e.g. --device-map auto)")
    if device_map:
        parse_device_map(device_map)
    parse_max_memory(max_memory)


def check_map_covers(model, device_map) -> None:
    """An explicit map (a JSON file) must name modules of `model` (built on the meta device: no weights)
    and place every one of its parameters; else one line listing the model's top-level modules (accelerate
    would otherwise leave them on one device, or ignore the map)."""
    if not isinstance(device_map, dict):
        return
    modules = {n for n, _ in model.named_modules()} | {n for n, _ in model.named_parameters()}
    unknown = [k for k in device_map if k and k not in modules]
    tops = [n for n, _ in model.named_children()]
    if unknown:
        raise UserError(f"--device-map names {unknown[0]!r}, which is no module of the model; its "
                        f"top-level modules: {', '.join(tops)}")
    refuse_unplaced(device_map, [n for n, _ in model.named_parameters()], tops)


def refuse_unplaced(device_map: dict, names: list[str], tops: list[str]) -> None:
    """The one coverage rule and message: every parameter name must fall under a key of the map (a key is a
    module path, a parameter's own name, or "" for the whole model). Shared by the check on an empty copy
    above and by the one from the checkpoint's safetensors header before anything loads
    (capture/map_check.py)."""

    def covered(param: str) -> bool:
        return any(k == "" or param == k or param.startswith(f"{k}.") for k in device_map)

    missing = [n for n in names if not covered(n)]
    if missing:
        raise UserError(f"--device-map places {len(names) - len(missing)} of the model's {len(names)} "
                        f"parameters (not {missing[0]}, ...); map every one of its top-level modules: "
                        f"{', '.join(tops)}")


NOISE = {
    "accelerate.big_modeling": "Some parameters are on the meta device because",
    "accelerate.utils.modeling": "The model weights are not tied.",
}
"""accelerate's lines on every dispatch that say nothing a user can act on (issue 49): offloaded weights
live on the meta device by design (provenance's dispatch.placed says what went where), and our tied
embedding is tied after the map is planned (capture/loading.py _tlm_device_map keeps both on one device)."""


class _DropNoise(logging.Filter):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def silence_dispatch_noise() -> None:
    """Drop NOISE's lines (only those) from accelerate's loggers, once per process."""
    for name, prefix in NOISE.items():
        log = logging.getLogger(name)
        if not any(isinstance(f, _DropNoise) for f in log.filters):
            log.addFilter(_DropNoise(prefix))


def from_pretrained_kwargs(device_map: str, max_memory: str) -> dict:
    """The keywords of `from_pretrained` that dispatch the model (with an offload folder removed at exit)."""
    silence_dispatch_noise()
    folder = tempfile.mkdtemp(prefix="tlm-offload-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return {"device_map": parse_device_map(device_map), "max_memory": parse_max_memory(max_memory),
            "offload_folder": folder}


def input_device(model) -> str:
    """Where a model takes its input ids: a dispatched one, the device of its first placed module (disk and
    CPU offload both compute on the CPU); any other, the device of its first weight."""
    placed = getattr(model, "hf_device_map", None)
    if not placed:
        return str(next(model.parameters()).device)
    first = next(iter(placed.values()))
    if first in ("cpu", "disk"):
        return "cpu"
    return f"cuda:{first}" if isinstance(first, int) else str(first)


def placement(model) -> dict[str, int]:
    """How many top-level placed modules went to each device (provenance: what was offloaded)."""
    counts: dict[str, int] = {}
    for device in (getattr(model, "hf_device_map", None) or {}).values():
        counts[str(device)] = counts.get(str(device), 0) + 1
    return counts
