"""The byte tokenizer (tokenizer.py's ByteTokenizer: UTF-8 bytes as ids 0..255, NUL = id 0 ends a document)
as a Hugging Face fast tokenizer, so `AutoTokenizer.from_pretrained(RUN)` and `nnsight.LanguageModel(RUN)`
load a byte-tokenizer run with the same ids.

A BPE with no merges over 256 entries: ASCII bytes are their own characters, every byte >= 128 reaches its id
through byte fallback (`<0xC3>` ...), so any text encodes to exactly its UTF-8 bytes and decodes back. NUL is
the eos token, and being already in the vocabulary it keeps id 0. New byte runs carry it as tokenizer.json;
earlier runs (only tlm_tokenizer.json) get it from `TLMByteTokenizer`, which hf.py registers with
AutoTokenizer for model_type "tlm" (tlm_probe.register_with_transformers()), so they load without any file
being written into them.
"""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedTokenizerFast

from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import read_json
from tlm_probe.models.tokenizer_meta import TOKENIZER_META

_EOS = "\x00"


def _byte_backend():
    from tokenizers import Tokenizer, decoders, models

    vocab = {(chr(b) if b < 128 else f"<0x{b:02X}>"): b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True))
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    return tok


def byte_fast_tokenizer() -> PreTrainedTokenizerFast:
    """A fresh fast tokenizer whose ids are ByteTokenizer's (save_pretrained writes its files)."""
    return PreTrainedTokenizerFast(tokenizer_object=_byte_backend(), eos_token=_EOS)


class TLMByteTokenizer(PreTrainedTokenizerFast):
    """AutoTokenizer's class for a "tlm" folder that has no tokenizer_config.json: the byte tokenizer when
    tlm_tokenizer.json says so, otherwise the error AutoTokenizer gives for a folder without a tokenizer."""

    @classmethod
    def from_pretrained(cls, path, *args, **kwargs):
        meta = Path(path) / TOKENIZER_META
        try:
            kind = read_json(meta).get("kind")
        except (UserError, AttributeError):
            kind = None
        if kind != "byte":
            raise OSError(f"{path} has no tokenizer files (tokenizer.json, tokenizer_config.json) and no "
                          f"byte tokenizer recorded in {TOKENIZER_META}")
        return cls(tokenizer_object=_byte_backend(), eos_token=_EOS)


_TOKENIZER_FILES = (TOKENIZER_META, "tokenizer_config.json", "tokenizer.json")
"""Any of these in a folder means it carries a tokenizer."""


def folder_tokenizer(folder: str | Path):
    """The Hugging Face tokenizer of a run folder (None when it carries none): its tokenizer files, or for
    a byte run with only tlm_tokenizer.json the byte tokenizer (TLMByteTokenizer); the ids are those
    tokenizer.load_saved_tokenizer gives (a layer above, not importable here). One line if it cannot load."""
    from transformers import AutoTokenizer

    folder = Path(folder)
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        return None
    files = (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file()
    try:  # with tokenizer files AutoTokenizer needs no model type; without, the byte tokenizer it is
        if files:
            return AutoTokenizer.from_pretrained(str(folder))
        return TLMByteTokenizer.from_pretrained(folder)
    except Exception as e:  # corrupt or partial tokenizer files
        raise UserError(f"cannot load the tokenizer of {folder}: {str(e).splitlines()[0]}") from None
