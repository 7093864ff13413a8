"""A run's tokenizer as GGUF tokenizer.ggml.* metadata, where llama.cpp has the same tokenizer.

Only tlm's own BPE (tokenizer.py: byte-level BPE with the GPT-2 split regex, no prefix space, no
normaliser) is written, as llama.cpp's "gpt2" BPE with pre-tokenizer "gpt-2": the same vocabulary, merges
and split. The byte-level tokenizer (ids = raw bytes) and arbitrary Hugging Face tokenizers are not written:
llama.cpp's BPE needs merges (the byte tokenizer has none) and an arbitrary tokenizer's normaliser and
split rules cannot be checked to match one of llama.cpp's pre-tokenizers. The file then says so in
`tlm_probe.tokenizer_note`, and the command prints it."""

from __future__ import annotations

import json

from gguf import GGUFWriter, TokenType


def vocab_metadata(tok, vocab_size: int) -> tuple[dict | None, str]:
    """({"tokens", "types", "merges", "eos"} or None, a note saying what was or was not included)."""
    if tok is None:
        return None, "no tokenizer included: the checkpoint folder holds none"
    kind = getattr(tok, "kind", None)
    if kind != "bpe":
        why = ("the byte-level tokenizer has no BPE merges, which llama.cpp's BPE needs" if kind == "byte"
               else f"only tlm's own BPE is written, this is a {kind!r} tokenizer")
        return None, f"no tokenizer included: {why}"
    backend = json.loads(tok.tok.backend_tokenizer.to_str())
    problem = _not_gpt2(backend)
    if problem:
        return None, f"no tokenizer included: {problem}"
    hf = tok.tok
    n = len(hf)
    if n > vocab_size:
        return None, f"no tokenizer included: it has {n} ids, the model only {vocab_size}"
    special = set(hf.all_special_ids)
    tokens = hf.convert_ids_to_tokens(list(range(n)))
    types = [int(TokenType.CONTROL if i in special else TokenType.NORMAL) for i in range(n)]
    # ids the model has beyond the tokenizer (a padded vocabulary): named and typed as convert_hf_to_gguf does
    tokens += [f"[PAD{i}]" for i in range(n, vocab_size)]
    types += [int(TokenType.UNUSED)] * (vocab_size - n)
    merges = [m if isinstance(m, str) else " ".join(m) for m in backend["model"]["merges"]]
    vocab = {"tokens": tokens, "types": types, "merges": merges, "eos": int(tok.eos_id)}
    return vocab, (f"tokenizer included: {n}-token BPE (tokenizer.ggml.model gpt2, pre gpt-2), "
                   f"{len(merges)} merges")


def _not_gpt2(backend: dict) -> str:
    """'' when the tokenizer is GPT-2's kind of byte-level BPE; else what differs."""
    pre, model = backend.get("pre_tokenizer") or {}, backend.get("model") or {}
    if model.get("type") != "BPE" or not model.get("merges"):
        return "its model is not a BPE with merges"
    if backend.get("normalizer"):
        return "it normalises text, which llama.cpp's gpt2 tokenizer does not"
    if pre.get("type") != "ByteLevel" or pre.get("add_prefix_space") or not pre.get("use_regex", True):
        return "its pre-tokenizer is not GPT-2's byte-level split"
    return ""


def add_vocab(writer: GGUFWriter, vocab: dict) -> None:
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(vocab["tokens"])
    writer.add_token_types(vocab["types"])
    writer.add_token_merges(vocab["merges"])
    writer.add_eos_token_id(vocab["eos"])
    writer.add_bos_token_id(vocab["eos"])  # no BOS of its own (llama.cpp's gpt2 default, id 11, is arbitrary)
    writer.add_add_bos_token(False)  # training never prepended one
