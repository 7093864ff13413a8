"""A llama2.c checkpoint + its tokenizer -> a Hugging Face LlamaForCausalLM folder (config.json,
model.safetensors, tokenizer.model + tokenizer.json) that `tlm probe`, `tlm eval` and transformers read.

The folder is written in a temporary folder and checked before it is renamed into place: every weight read
back from model.safetensors equals the llama2.c array (after the RoPE row permutation), the model loads with
AutoModelForCausalLM and gives finite logits, and the Hugging Face tokenizer encodes a check sentence to the
same ids as SentencePiece does with the model's own tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tlm_probe.convert.llama2c_tokenizer import load_tokenizer_model, write_hf_tokenizer
from tlm_probe.convert.llama2c_weights import hf_config, hf_state, read_config, read_weights
from tlm_probe.errors import UserError

FILES = ("config.json", "model.safetensors", "generation_config.json", "tokenizer.model", "tokenizer.json",
         "tokenizer_config.json", "special_tokens_map.json", "llama2c.json")
_CHECK_TEXT = "Once upon a time, there was a little girl named Lily. She liked  to play\nin the park."


def check_llama2c_inputs(model_bin: Path, tokenizer: Path):
    """Everything that can refuse the conversion, before a file is written: (config, tokenizer bytes)."""
    if not model_bin.is_file():
        raise UserError(f"llama2.c checkpoint not found: {model_bin}")
    cfg = read_config(model_bin)
    return cfg, load_tokenizer_model(tokenizer, cfg.vocab_size)


def write_folder(model_bin: Path, tok_blob: bytes, folder: Path) -> dict:
    """Write the Hugging Face folder into `folder` (an empty temporary one) and verify it; a summary."""
    from safetensors.numpy import save_file

    cfg, tensors = read_weights(model_bin)
    state = hf_state(cfg, tensors)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config(cfg), indent=2) + "\n")
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}) + "\n")
    write_hf_tokenizer(tok_blob, folder)
    (folder / "llama2c.json").write_text(json.dumps({"source": str(model_bin), **vars(cfg)}, indent=2) + "\n")
    _verify(folder, state, tok_blob)
    return {"layers": cfg.n_layers, "d_model": cfg.dim, "d_ff": cfg.hidden_dim, "heads": cfg.n_heads,
            "kv_heads": cfg.n_kv_heads, "vocab_size": cfg.vocab_size, "context": cfg.seq_len,
            "shared_classifier": cfg.shared_classifier, "parameters": int(sum(
                v.size for k, v in state.items() if "freq" not in k))}


def _verify(folder: Path, state: dict[str, np.ndarray], tok_blob: bytes) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    got = model.state_dict()
    for name, want in state.items():
        if not np.array_equal(got[name].numpy(), want):
            raise UserError(f"the written folder's {name} differs from the llama2.c weights; nothing written")
    with torch.no_grad():
        logits = model(torch.arange(min(8, model.config.vocab_size))[None]).logits
    if not torch.isfinite(logits).all():
        raise UserError("the converted model gives non-finite logits; nothing written")
    ours = AutoTokenizer.from_pretrained(str(folder))(_CHECK_TEXT)["input_ids"]
    theirs = sentencepiece_ids(tok_blob, _CHECK_TEXT)
    if ours != theirs:
        raise UserError(f"the Hugging Face tokenizer encodes a check sentence as {ours[:12]}..., "
                        f"SentencePiece as {theirs[:12]}...; nothing written")


def sentencepiece_ids(tok_blob: bytes, text: str, bos: bool = True) -> list[int]:
    """What llama2.c's training scripts fed the model: SentencePiece ids, BOS first."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(tok_blob)
    return ([sp.bos_id()] if bos else []) + sp.encode(text)
