"""Is the MODEL argument something that can be loaded? Checked first, by every command that loads a model,
before data is read or torch imported (issue 49): a path that does not exist is refused at once instead of
being taken for a hub name (35-48 s of the hub's retries), and so is a hub name that is not in the local
cache while the hub is offline (HF_HUB_OFFLINE). Reading no file but config.json (check_folder)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, get_args

from tlm_probe.capture.adapters import check_folder, split_stack
from tlm_probe.capture.map_check import check_map_before_loading
from tlm_probe.errors import UserError

TRUE = ("1", "true", "yes", "on")
GGUF_SUFFIX = ".gguf"
Dtype = Literal["float32", "float64", "bfloat16", "float16"]
DTYPE_NAMES: tuple[str, ...] = get_args(Dtype)
"""The --dtype values the loaders take (capture/loading.py DTYPES maps each to torch's), without torch."""


def looks_like_path(s: str) -> bool:
    """A name no hub repo has: relative or absolute paths, names with a suffix or more than one slash, and
    "runs/cosinee" where runs/ is a folder here (a mistyped folder)."""
    in_local_dir = "/" in s and Path(s.split("/")[0]).is_dir()
    return s.startswith((".", "/", "~")) or s.count("/") > 1 or Path(s).suffix != "" or in_local_dir


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in TRUE


def hub_caches() -> list[Path]:
    """Where huggingface_hub (and older transformers) keep downloaded repos, by their own rules, without
    importing them: the first is where a download would go."""
    env = [os.environ.get(k) for k in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE")]
    home = os.environ.get("HF_HOME") or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                                             / "huggingface")
    return [Path(p).expanduser() for p in (*env, str(Path(home) / "hub")) if p]


def in_hub_cache(repo: str) -> bool:
    return any((c / f"models--{repo.replace('/', '--')}").is_dir() for c in hub_caches())


def check_dispatchable(model: str) -> None:
    """A --device-map places a Hugging Face model's modules: not a GGUF file's (read whole by its own loader)
    nor one stack of an encoder-decoder."""
    source, stack = split_stack(str(model))
    if (stack is not None and not Path(str(model)).exists()) or str(model).endswith(GGUF_SUFFIX):
        raise UserError("--device-map serves checkpoint folders and hub models, not a .gguf file or one "
                        "stack of an encoder-decoder")


def check_model_source(model: str, flag: str = "", device_map: str = "") -> None:
    """One UserError line for a model that cannot be there (`flag`: which argument, where there are two),
    or a --device-map file that does not place all of it (capture/map_check.py); the loader says the rest,
    in the same words."""
    which = f" ({flag})" if flag else ""
    source, stack = split_stack(str(model))
    if device_map:
        check_dispatchable(model)
    if Path(model).exists() or (stack and Path(source).exists()):
        check_folder(model)  # an unsupported architecture, from config.json alone
        check_map_before_loading(model, device_map)
        return
    if looks_like_path(source):
        raise UserError(f"checkpoint folder not found: {model}{which} (a path: not looked up on the hub)")
    if hub_offline() and not in_hub_cache(source):
        raise UserError(f"cannot load model {model!r}{which}: no folder {model!r} here, and on the hub: the "
                        f"hub is offline (HF_HUB_OFFLINE) and its cache ({hub_caches()[0]}) holds no copy of "
                        f"{source!r}")
