"""Load any supported model (our checkpoints, Hugging Face folders or hub names) as a ProbeModel
(capture/probe_model.py: the wrapper itself lives apart from the loaders, so the capture code that only
uses a loaded model never imports them)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tlm_probe import register_with_transformers
from tlm_probe.api_names import renamed_keywords
from tlm_probe.capture.adapters import (
    STACK_SEP,
    Adapter,
    adapter_for,
    check_supported,
    discovery_enabled,
    known_adapter,
    split_stack,
    stack_adapter,
)
from tlm_probe.capture.dispatch import from_pretrained_kwargs
from tlm_probe.capture.model_source import DTYPE_NAMES, GGUF_SUFFIX, check_dispatchable, looks_like_path
from tlm_probe.capture.probe_model import ProbeModel
from tlm_probe.capture.seq2seq import decoder_start
from tlm_probe.capture.widths import check_declared, declared_widths, layer_mlp, neuron_refusal
from tlm_probe.errors import UserError
from tlm_probe.models.config_file import read_config_json
from tlm_probe.models.device import check_device
from tlm_probe.models.tokenizer_meta import TOKENIZER_META
from tlm_probe.models.verify import PICKLE_WEIGHTS
from tlm_probe.progress import Phase

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}
GENERIC_NAMES = ("model", "models", "checkpoint", "final", "hf")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "tokenizer.model", "vocab.json")


def wrap_model(
    model: nn.Module,
    tokenizer: Any = None,
    name: str = "model",
    path: Path | None = None,
    adapter: Adapter | None = None,
) -> ProbeModel:
    """Build a ProbeModel around an already loaded module (our TaperedLM or a transformers model), with
    the row serving its model type (or `adapter`); with discovery enabled, a type with no row gets an
    inferred row, proved on this model first (capture/discovery.py)."""
    config = getattr(model, "config", None) or getattr(model, "cfg", None)
    model_type = "tlm" if hasattr(model, "cfg") and not hasattr(model, "config") else config.model_type
    adapter = adapter or known_adapter(model_type) or _discovered(model, config, model_type)
    kind = adapter.block_kind(config)
    pm = ProbeModel(
        model=model.eval(),
        adapter=adapter,
        tokenizer=tokenizer,
        name=name,
        family=adapter.family,
        model_type=model_type,
        block_kind=kind,
        n_layers=0,
        d_ff=(),
        is_causal=adapter.is_causal,
        vocab_size=int(config.vocab_size),
        d_model=int(
            next(getattr(config, k) for k in ("d_model", "hidden_size", "n_embd") if hasattr(config, k))
        ),
        path=path,
    )
    layers = _find(pm.base, adapter.layers, f"the {adapter.family} row's layers")
    pm.n_layers = len(layers)
    _check_taps(pm, layers[0])
    _apply_setup(adapter, layers)
    pm.mlp_layers = tuple(layer_mlp(adapter, layer, config, pm.d_model) for layer in layers)
    pm.d_ff = tuple(m["d_ff"] for m in pm.mlp_layers)
    check_declared(list(pm.mlp_layers), declared_widths(config), f"the {name} config")
    pm.neuron_refusal = neuron_refusal(list(pm.mlp_layers))
    pm.scales = dict(adapter.scale(config)) if adapter.scale else {}
    pm.lens_refusal = adapter.head_transform(config) if adapter.head_transform else None
    return pm


def as_probe_model(model: Any, tokenizer: Any = None) -> ProbeModel:
    """A ProbeModel as is (`tokenizer` replaces its own when given), or one wrapped around a loaded module
    (transformers' or ours; its tokenizer: `tokenizer`, else the module's own `tokenizer` attribute), named
    after config.name_or_path, else its class. Anything else is a UserError line."""
    tokenizer = given_tokenizer(tokenizer)
    if isinstance(model, ProbeModel):
        return model if tokenizer is None else replace(model, tokenizer=tokenizer)
    if not isinstance(model, nn.Module):
        raise UserError(f"expected a model folder, hub name, .gguf file, loaded nn.Module or ProbeModel, got "
                        f"{type(model).__name__}")
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) is None and not hasattr(model, "cfg"):
        raise UserError(f"a loaded {type(model).__name__} is not a model tlm can probe: give a transformers "
                        "model (its .config names a model_type) or one of ours (TaperedLM)")
    name = str(getattr(config, "name_or_path", "") or type(model).__name__)
    return wrap_model(model, tokenizer if tokenizer is not None else getattr(model, "tokenizer", None),
                      name=Path(name).name or name)


def _discovered(model: nn.Module, config: Any, model_type: str) -> Adapter:
    if not discovery_enabled():
        return adapter_for(model_type)  # the refusal, naming the closest type and how to add a row
    from tlm_probe.capture.discovery import discover

    return discover(model, config, lambda m, row: wrap_model(m, adapter=row))


def _find(root: nn.Module, path: str, what: str) -> nn.Module:
    try:
        return root.get_submodule(path)
    except AttributeError as e:
        raise UserError(f"{what}: the model has no module {path!r} ({type(root).__name__})") from e


def _check_taps(pm: ProbeModel, first: nn.Module) -> None:
    """Every tap of the row names a module of layer 0 (a wrong path is one clear line, not a traceback)."""
    for piece, tap in pm.taps().items():
        path, where = tap.rpartition(":")[::2]
        if where not in ("in", "out"):
            raise UserError(
                f"the {pm.family} row's tap for {piece} is {tap!r}: expected 'path:in' or 'path:out'"
            )
        if path:
            _find(first, path, f"the {pm.family} row's tap for {piece}")


def _apply_setup(adapter: Adapter, layers) -> None:
    """Adapter.setup: attribute settings that change no number (see rows.Adapter.setup)."""
    for layer in layers:
        for key, value in adapter.setup.items():
            path, _, attr = key.rpartition(".")
            setattr(layer.get_submodule(path) if path else layer, attr, value)


@renamed_keywords(allow_pickle="unsafe_pickle")
def load_probe_model(
    path_or_name: str | Path,
    device: str = "cpu",
    dtype: str = "float32",
    trust_remote_code: bool = False,
    unsafe_pickle: bool = False,
    device_map: str = "",
    max_memory: str = "",
    attn_implementation: str | None = None,
) -> ProbeModel:
    """Load our checkpoint folder, a Hugging Face folder, or a hub name; refuse pickle unless allowed.
    MODEL:decoder probes the decoder stack of an encoder-decoder (T5) as its own model, named so.
    device_map / max_memory: dispatch the blocks over devices, CPU and disk (capture/dispatch.py).
    attn_implementation: transformers' attention kernel for a transformers model ("eager" for attention
    statistics: capture/attention.py); None keeps transformers' default; our models ignore it.
    A load that takes a while says so on stderr ("loading X ...", then what was loaded and in how long:
    progress.Phase), wherever it is called from."""
    with Phase(f"loading {path_or_name}") as phase:
        pm = _load_probe_model(path_or_name, device, dtype, trust_remote_code, unsafe_pickle, device_map,
                               max_memory, attn_implementation)
        phase.result = f"loaded {path_or_name} ({pm.family}, {pm.n_layers} layers)"
    return pm


def _load_gguf_model(path: Path, dtype: str, device: str) -> ProbeModel:
    """A .gguf file, dequantized; its MLP widths checked against the ones its header declares."""
    from tlm_probe.capture.gguf import load_gguf
    from tlm_probe.capture.widths import gguf_widths

    model, tokenizer = load_gguf(path, DTYPES[dtype])
    pm = wrap_model(model.to(device), tokenizer, path.stem, path)
    check_declared(list(pm.mlp_layers), gguf_widths(path).get("d_ff"), str(path))
    return pm


def _load_probe_model(path_or_name, device, dtype, trust_remote_code, unsafe_pickle, device_map, max_memory,
                      attn_implementation=None):
    dispatch = from_pretrained_kwargs(device_map, max_memory) if device_map else {}
    kernel = {"attn_implementation": attn_implementation} if attn_implementation else {}
    if max_memory and not device_map:
        raise UserError("--max-memory caps a dispatch: give --device-map too (e.g. --device-map auto)")
    if dtype not in DTYPES:
        raise UserError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    check_device(device)
    source, stack = split_stack(str(path_or_name))
    if dispatch:
        check_dispatchable(path_or_name)
    if stack is not None and not Path(str(path_or_name)).exists():  # a folder named "x:decoder" is a folder
        return _load_stack(source, stack, dtype, device, trust_remote_code, unsafe_pickle)
    if str(path_or_name).endswith(GGUF_SUFFIX):
        return _load_gguf_model(Path(path_or_name), dtype, device)
    folder = Path(path_or_name)
    if folder.is_dir():
        raw = read_config_json(folder)
        # a folder called "model" says nothing: name it after its parent
        name = folder.resolve().parent.name if folder.name in GENERIC_NAMES else folder.name
        if raw.get("model_type") == "tlm" and dispatch:
            return _load_tlm_dispatched(folder, name, dtype, unsafe_pickle, dispatch)
        if raw.get("model_type") == "tlm":
            from tlm_probe.models.io import load_tlm  # imports transformer_lens: only for our checkpoints

            model = load_tlm(folder, device=device, unsafe_pickle=unsafe_pickle).to(DTYPES[dtype])
            return wrap_model(model, load_tokenizer(folder), name, folder)
        check_supported(raw.get("model_type"))  # fail early and clearly on an unsupported family
        _check_weights(folder, unsafe_pickle)
    elif looks_like_path(str(path_or_name)):
        raise UserError(f"checkpoint folder not found: {path_or_name} (a path: not looked up on the hub)")
    else:
        name = str(path_or_name)
    return _load_hf(str(path_or_name), name, device, dtype, trust_remote_code, unsafe_pickle,
                    folder if folder.is_dir() else None, dispatch={**dispatch, **kernel})


def _load_tlm_dispatched(folder: Path, name: str, dtype: str, unsafe_pickle: bool, dispatch: dict):
    """Our checkpoint through transformers' loader (TLMForCausalLM: same modules and state-dict names),
    which is what dispatches; safetensors only, as load_tlm. A strategy name becomes an explicit map here,
    from accelerate's planner on an empty copy (transformers' own planner cannot follow our tied
    embedding), blocks kept whole."""
    from tlm_probe.models.hf import TLMForCausalLM

    _check_weights(folder, unsafe_pickle)
    dispatch = dict(dispatch)
    if isinstance(dispatch["device_map"], str):
        dispatch["device_map"] = _tlm_device_map(TLMForCausalLM, folder, dtype, dispatch)
    else:
        _check_map(TLMForCausalLM, TLMForCausalLM.config_class.from_pretrained(str(folder)), dispatch, False)
    dispatch.pop("max_memory")
    try:
        model = TLMForCausalLM.from_pretrained(str(folder), dtype=DTYPES[dtype], **dispatch)
    except Exception as e:
        raise UserError(f"cannot dispatch {folder}: {_first_line(e)}") from e
    return wrap_model(model, load_tokenizer(folder), name, folder)


def _tlm_device_map(cls, folder: Path, dtype: str, dispatch: dict) -> dict:
    from accelerate import infer_auto_device_map, init_empty_weights
    from accelerate.utils import get_balanced_memory

    with init_empty_weights():
        empty = cls(cls.config_class.from_pretrained(str(folder))).to(DTYPES[dtype])
    no_split, memory = list(cls._no_split_modules), dispatch["max_memory"]
    if dispatch["device_map"].startswith("balanced"):
        memory = get_balanced_memory(empty, max_memory=memory, no_split_module_classes=no_split,
                                     low_zero=dispatch["device_map"] == "balanced_low_0")
    placed = dict(infer_auto_device_map(empty, max_memory=memory, no_split_module_classes=no_split))
    if empty.cfg.tie_embeddings and "embed" in placed:  # one tensor: the unembedding goes with the embedding
        placed["unembed"] = placed["embed"]
    return placed


def _load_stack(
    source: str, stack: str, dtype: str, device: str, trust_remote_code: bool, allow_pickle: bool
) -> ProbeModel:
    """One stack of an encoder-decoder, with that stack's row, named MODEL:stack in the result table."""
    folder = Path(source)
    if folder.is_dir():
        stack_adapter(read_config_json(folder).get("model_type"), stack)  # refuse before heavy imports
        _check_weights(folder, allow_pickle)
        name = folder.resolve().parent.name if folder.name in GENERIC_NAMES else folder.name
    elif looks_like_path(source):
        raise UserError(f"checkpoint folder not found: {source} (a path: not looked up on the hub)")
    else:
        name = source
    pm = _load_hf(source, f"{name}{STACK_SEP}{stack}", device, dtype, trust_remote_code, allow_pickle,
                  folder if folder.is_dir() else None, stack=stack)
    decoder_start(pm.model.config)  # refused now, not at the first batch
    return pm


def _check_weights(folder: Path, allow_pickle: bool) -> None:
    if any(folder.glob("*.safetensors")) or (folder / "model.safetensors.index.json").is_file():
        return
    pickles = [p for p in PICKLE_WEIGHTS if (folder / p).is_file()] + [p.name for p in folder.glob("*.bin")]
    if pickles and not allow_pickle:
        raise UserError(
            f"{folder} has only pickle weights ({pickles[0]}); refusing to unpickle "
            "(pass --unsafe-pickle if you trust this file)"
        )
    if not pickles:
        raise UserError(f"no model.safetensors in {folder}")


def _load_hf(
    source: str,
    name: str,
    device: str,
    dtype: str,
    trust_remote_code: bool,
    allow_pickle: bool,
    folder: Path | None,
    stack: str | None = None,
    dispatch: dict | None = None,
) -> ProbeModel:
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    register_with_transformers()  # a tlm folder loads through the Auto classes too
    hf_logging.disable_progress_bar()  # a progress bar per load would bury the probe's own output

    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    except Exception as e:  # offline hub, typo, corrupt json: all one line for the user
        where = "" if folder is not None else f"no folder {source!r} here, and on the hub: "
        raise UserError(f"cannot load model {source!r}: {where}{_first_line(e)}") from e
    model_type = getattr(config, "model_type", None)
    if stack is None:
        check_supported(model_type)
    adapter = stack_adapter(model_type, stack) if stack else known_adapter(model_type)  # None: discovery
    auto = AutoModelForCausalLM if adapter is None or adapter.is_causal else AutoModel
    auto = adapter.model_class() if adapter is not None and adapter.model_class else auto
    _check_map(auto, config, dispatch, trust_remote_code)
    try:
        model = auto.from_pretrained(
            source,
            config=config,
            dtype=DTYPES[dtype],
            trust_remote_code=trust_remote_code,
            use_safetensors=None if allow_pickle else True,
            **(dispatch or {}),
        )
    except Exception as e:
        raise UserError(f"cannot load weights of {source!r}: {_first_line(e)}") from e
    placed = bool((dispatch or {}).get("device_map"))
    model = model if placed else model.to(device)  # a dispatched model stays where accelerate put it
    return wrap_model(model, load_tokenizer(source), name, folder, adapter=adapter)


def _check_map(auto, config, dispatch: dict | None, trust_remote_code: bool) -> None:
    """An explicit --device-map places every parameter (checked on an empty copy: no weights read)."""
    if not dispatch or not isinstance(dispatch.get("device_map"), dict):
        return
    from accelerate import init_empty_weights

    from tlm_probe.capture.dispatch import check_map_covers

    with init_empty_weights():
        empty = auto.from_config(config, trust_remote_code=trust_remote_code) \
            if hasattr(auto, "from_config") else auto(config)
    check_map_covers(empty, dispatch["device_map"])


def given_tokenizer(tokenizer: Any) -> Any:
    """A caller's tokenizer= : a tokenizer (anything callable on a text) as is, a folder or hub name loaded
    as the model's would be, None left None; anything else one UserError."""
    if tokenizer is None or callable(tokenizer):
        return tokenizer
    if not isinstance(tokenizer, str | Path):
        raise UserError(f"tokenizer= is a tokenizer, or the folder or hub name of one, not "
                        f"{type(tokenizer).__name__}")
    loaded = load_tokenizer(tokenizer)
    if loaded is None:
        raise UserError(f"tokenizer={str(tokenizer)!r}: no tokenizer could be loaded from it (a folder with "
                        "tokenizer.json or tokenizer_config.json, or a hub name)")
    return loaded


def load_tokenizer(source: str | Path) -> Any | None:
    """The model's tokenizer, or None when the checkpoint has none (probe from token ids then)."""
    folder = Path(source)
    if folder.is_dir() and (folder / TOKENIZER_META).is_file():  # a tlm run folder: byte-level or HF
        from tlm_probe.tokenizer import load_saved_tokenizer

        saved = load_saved_tokenizer(folder)
        return saved if saved is None or saved.kind == "byte" else saved.tok
    if folder.is_dir() and not any((folder / f).is_file() for f in _TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    register_with_transformers()
    logging.getLogger("transformers.tokenization_utils_base").setLevel(logging.ERROR)
    try:
        return AutoTokenizer.from_pretrained(str(source))
    except Exception:  # a model without (loadable) tokenizer files is still probeable from token ids
        return None


def _first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]
