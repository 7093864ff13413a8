"""GGUF files (llama.cpp's format) through transformers' GGUF loader: the quantized tensors are
dequantized (by the `gguf` package) into a regular transformers model of the chosen dtype, and the
tokenizer is rebuilt from the file's metadata. Nothing is fetched: config, weights and tokenizer all come
from the one file."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from tlm_probe.capture.adapters import check_supported, known_adapter
from tlm_probe.capture.gguf_header import check_gguf
from tlm_probe.errors import UserError


def load_gguf(path: Path, dtype: torch.dtype):
    """(causal LM, tokenizer) from a .gguf file; a UserError for a missing, corrupt or unsupported file."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    check_gguf(path)  # every declared length within the file, before the gguf reader allocates it
    hf_logging.disable_progress_bar()
    logging.getLogger("transformers.modeling_gguf_pytorch_utils").setLevel(logging.ERROR)
    folder, name = str(path.parent), path.name
    try:
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
    except Exception as e:  # not GGUF, truncated, an architecture transformers cannot convert
        raise UserError(f"cannot read GGUF file {path}: {_first_line(e)}") from e
    check_supported(getattr(config, "model_type", None))  # one clear line for an unsupported family
    adapter = known_adapter(config.model_type)
    if adapter is not None and not adapter.is_causal:
        raise UserError(f"{path} holds a {config.model_type} model, not a causal language model")
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, config=config, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        tokenizer.name_or_path = str(path)  # provenance: the tokenizer came from this file
    except Exception as e:
        raise UserError(f"cannot load GGUF file {path}: {_first_line(e)}") from e
    return model, tokenizer


def _first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]
