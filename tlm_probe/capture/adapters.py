"""The table of architecture adapters: where each model family keeps its layers and sublayers.

All architecture knowledge lives in ADAPTERS (module paths, block kind, how the model is called, position
offsets, scale factors, how TransformerLens wraps it); nothing else in the package branches on a family or
model type. rows.py says what a row holds and what each piece means.

Block kinds: "sequential" pre-LN (resid_mid = resid_pre + attn_out, resid_post = resid_mid + mlp_out),
"parallel" (attention and MLP both read resid_pre; resid_post = resid_pre + attn_out + mlp_out; there is no
resid_mid tap: the probe uses resid_pre + attn_out, the stream the MLP output is added to), and "post_ln"
(BERT: resid_mid is LayerNorm(resid_pre + attn_out), resid_post is LayerNorm(resid_mid + mlp_out)).

The rows live in capture/families/ (one module per family group); this module looks them up and holds
the rows a user adds. To add a family: add one Adapter row there with its Hugging Face `model_type` values
and taps; the guardrails (every tap fires, the pieces add up) tell you at once if a path is wrong.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from tlm_probe.capture.families import ADAPTERS
from tlm_probe.capture.families.encoders import STACKS
from tlm_probe.capture.families.refused import REFUSED
from tlm_probe.capture.rows import (
    BLOCK_KINDS,
    MIXER_ONLY,
    PARALLEL,
    PIECES,
    POST_LN,
    SEQUENTIAL,
    Adapter,
    fixed,
    split_tap,
)
from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import read_json
from tlm_probe.models.config_file import CONFIG, read_config_json

__all__ = ["ADAPTERS", "BLOCK_KINDS", "PARALLEL", "PIECES", "POST_LN", "SEQUENTIAL", "Adapter", "adapter_for"]
__all__ += ["MIXER_ONLY", "split_tap"]

_BY_TYPE = {t: a for a in ADAPTERS.values() for t in a.model_types}
_USER: dict[str, Adapter] = {}
"""Rows a user added or overrode (register_adapter, `tlm probe --adapter FILE`); looked up first."""


def register_adapter(row: Adapter) -> None:
    """Add or override a row without editing the package: `row` serves its model_types from now on (in
    this process). The guardrails prove it on the loaded model before any statistic is computed."""
    for t in row.model_types:
        _USER[t] = row


DISCOVERY = {"enabled": False}
"""Whether a model type with no row is discovered (capture/discovery.py) instead of refused; off by
default so that an unknown type is refused from config.json alone, before any heavy import."""


def enable_discovery(on: bool = True) -> None:
    """`tlm probe --discover`: infer a row for a model type the table lacks, proved before it is used."""
    DISCOVERY["enabled"] = on


def discovery_enabled() -> bool:
    return DISCOVERY["enabled"]


def adapter_source(row: Adapter) -> str:
    """ "user" for a registered row, else the row's origin ("table", "discovered"); recorded in provenance."""
    return "user" if any(r is row for r in _USER.values()) else row.origin


def known_adapter(model_type: str | None) -> Adapter | None:
    """The row serving `model_type` (a user's first), None where neither the user nor the table has one."""
    return _USER.get(model_type) or _BY_TYPE.get(model_type)


def check_supported(model_type: str | None) -> None:
    """Refuse a model type with no row (adapter_for's message), unless discovery will try to infer one."""
    if known_adapter(model_type) is None and (model_type in REFUSED or not discovery_enabled()):
        adapter_for(model_type)


def adapter_for(model_type: str | None) -> Adapter:
    """The row serving `model_type`, or a UserError naming the closest known type and how to add a row."""
    if model_type in _USER:
        return _USER[model_type]
    if model_type in _BY_TYPE:
        return _BY_TYPE[model_type]
    if model_type in REFUSED:
        raise UserError(f"{model_type} models are not supported: {REFUSED[model_type]}")
    families = "; ".join(f"{a.family} ({', '.join(a.model_types)})" for a in ADAPTERS.values())
    close = difflib.get_close_matches(str(model_type), list(_BY_TYPE), n=1, cutoff=0.5)
    closest = f"Closest known type: {close[0]} ({_BY_TYPE[close[0]].family} row). " if close else ""
    raise UserError(
        f"unsupported architecture {model_type!r}. {closest}Supported families: {families}. To add one "
        "without editing the package, pass `tlm probe --adapter ROW.json` (a row: layers, mlp, mlp_down, "
        "final_norm, lm_head, block_kind, taps) or call tlm_probe.capture.adapters.register_adapter; "
        "or pass `tlm probe --discover` to infer one from the module tree (proved before use); "
        "or add an Adapter row (layer path + taps) to tlm_probe/capture/families/"
    )


STACK_SEP = ":"


def split_stack(spec: str) -> tuple[str, str | None]:
    """'runs/t5:decoder' -> ('runs/t5', 'decoder'): the stack of an encoder-decoder to probe as its own
    model (families.encoders.STACKS); a spec without a known stack suffix is returned whole."""
    head, sep, stack = str(spec).rpartition(STACK_SEP)
    if sep and head and stack in {s for _, s in STACKS}:
        return head, stack
    return str(spec), None


def stack_adapter(model_type: str | None, stack: str) -> Adapter:
    """The row for one stack of an encoder-decoder (MODEL:decoder), or a UserError naming what exists."""
    row = STACKS.get((model_type, stack))
    if row is None:
        known = ", ".join(f"{t}:{s}" for t, s in STACKS)
        raise UserError(
            f"{model_type} models have no {stack!r} stack to probe (MODEL:{stack} exists for: {known})"
        )
    return row


ROW_FIELDS = {"family", "model_types", "layers", "mlp", "mlp_down", "final_norm", "lm_head", "block_kind",
              "taps", "is_causal", "pattern"}
OPTIONAL_FIELDS = {"is_causal", "pattern"}


def load_adapter_file(path: str | Path) -> Adapter:
    """A row from a JSON file: {"family", "model_types": [...], "layers", "mlp", "mlp_down", "final_norm",
    "lm_head", "block_kind": "sequential" | "parallel" | "post_ln", "taps": {piece: "path:in|out"},
    "is_causal" (default true), "pattern" (optional: "path:weights", the attention module whose output's
    last element is its weights, for attention statistics)}."""
    try:
        raw = read_json(path)
    except UserError as e:
        raise UserError(f"cannot read adapter file {path}: {e}") from None
    if not isinstance(raw, dict):
        raise UserError(f"adapter file {path}: expected a JSON object (a row), got {type(raw).__name__}")
    unknown, missing = set(raw) - ROW_FIELDS, ROW_FIELDS - OPTIONAL_FIELDS - set(raw)
    if unknown or missing:
        raise UserError(
            f"adapter file {path}: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}"
        )
    kind = raw["block_kind"]
    if kind not in BLOCK_KINDS:
        raise UserError(f"adapter file {path}: block_kind {kind!r} is not one of {', '.join(BLOCK_KINDS)}")
    return Adapter(
        str(raw["family"]),
        tuple(raw["model_types"]),
        layers=raw["layers"],
        mlp=raw["mlp"],
        mlp_down=raw["mlp_down"],
        final_norm=raw["final_norm"],
        lm_head=raw["lm_head"],
        taps={kind: dict(raw["taps"])},
        kind_of=fixed(kind),
        is_causal=bool(raw.get("is_causal", True)),
        pattern=raw.get("pattern"),
        notes=f"user row from {path}",
    )


def check_folder(source: str | Path) -> None:
    """Refuse a local checkpoint folder whose config.json names a model type no row serves, before the
    caller imports torch, transformers or TransformerLens (a refusal took 7-11 s, almost all imports).
    Anything else (hub names, GGUF files, unreadable configs) is left to load_probe_model."""
    head, stack = split_stack(str(source))
    folder = Path(head if stack and not Path(source).exists() else source)
    if not (folder / CONFIG).is_file():
        return
    try:
        model_type = read_config_json(folder).get("model_type")
    except UserError:
        return
    if stack and folder != Path(source):
        stack_adapter(model_type, stack)  # MODEL:decoder of a type with no such stack
    else:
        check_supported(model_type)
