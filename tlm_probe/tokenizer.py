"""Tokenizers behind one small interface: byte-level (no training), a BPE trained with `tokenizers` on the
training split, or any Hugging Face tokenizer folder / hub name.

Spec strings (`--tokenizer`): "byte" | "bpe" | "bpe:VOCAB" | PATH_OR_HUB_NAME. A tokenizer saves itself
into a run folder (tlm_tokenizer.json says which kind, plus the usual Hugging Face tokenizer files), so a
checkpoint carries the tokenizer it was trained with.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from tlm_probe.errors import UserError
from tlm_probe.files.bounded import read_bounded
from tlm_probe.files.jsonfile import JSON_MAX_BYTES as MAX_JSON_BYTES
from tlm_probe.files.jsonfile import loads_bounded, read_json
from tlm_probe.files.vocab_count import count_entries
from tlm_probe.models.tokenizer_meta import TOKENIZER_META

EOS = "<|endoftext|>"
DEFAULT_BPE_VOCAB = 4096
TOKENIZER_KINDS = ("byte", "bpe", "hf")
"""The `kind` a saved tokenizer records (tlm_tokenizer.json): ByteTokenizer.kind and HFTokenizer's kinds."""


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255; the NUL byte (never in text) separates documents."""

    kind = "byte"
    vocab_size = 256
    eos_id = 0
    name = "byte"

    @property
    def hash(self) -> str:
        return hashlib.sha256(b"tlm-byte-v1").hexdigest()[:16]

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8", "replace"), dtype=np.uint8).astype(np.uint32)

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", "replace")

    def __call__(self, text: str, add_special_tokens: bool = False, **_) -> dict:
        """The Hugging Face call convention, so the probe tokenises text for byte-level checkpoints."""
        return {"input_ids": self.encode(text).tolist()}

    def n_bytes(self, ids: np.ndarray) -> int:
        return int(np.asarray(ids).size)

    def save(self, folder: Path) -> None:
        """tlm_tokenizer.json, plus tokenizer.json / tokenizer_config.json with the same ids, so
        AutoTokenizer (and nnsight.LanguageModel) load the run folder (models/hf_tokenizer.py)."""
        from tlm_probe.models.hf_tokenizer import byte_fast_tokenizer

        byte_fast_tokenizer().save_pretrained(str(folder))
        (folder / TOKENIZER_META).write_text(json.dumps({"kind": "byte"}) + "\n")


class HFTokenizer:
    """A transformers fast tokenizer (a trained BPE is wrapped the same way, so AutoTokenizer reads it)."""

    def __init__(self, tok, kind: str, name: str):
        self.tok, self.kind, self.name = tok, kind, name
        self.vocab_size = len(tok)
        eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
        self.eos_id = eos

    @property
    def hash(self) -> str:
        backend = getattr(self.tok, "backend_tokenizer", None)
        text = backend.to_str() if backend is not None else json.dumps(sorted(self.tok.get_vocab().items()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tok(text, add_special_tokens=False)["input_ids"], dtype=np.uint32)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        out = self.tok(texts, add_special_tokens=False)["input_ids"]
        return [np.asarray(ids, dtype=np.uint32) for ids in out]

    def decode(self, ids: Iterable[int]) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def n_bytes(self, ids: np.ndarray) -> int:
        return len(self.decode(ids).encode("utf-8"))

    def save(self, folder: Path) -> None:
        self.tok.save_pretrained(str(folder))
        (folder / TOKENIZER_META).write_text(json.dumps({"kind": self.kind, "name": self.name}) + "\n")


def train_bpe(texts: Iterable[str], vocab_size: int = DEFAULT_BPE_VOCAB) -> HFTokenizer:
    """A byte-level BPE trained on `texts` (deterministic for the same texts and vocab size)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 257 + 1:
        raise UserError(f"BPE vocab size must exceed 257 (256 bytes + {EOS}), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS)
    return HFTokenizer(fast, "bpe", f"bpe:{vocab_size}")


MAX_VOCAB = 2**20
"""The most entries a tokenizer may have (the largest released vocabularies hold ~262k): a bigger one is
refused before the tokenizers library builds it (and a model allocates an embedding row per entry)."""


def check_vocab_size(name_or_path: str) -> None:
    """A local tokenizer.json's entries (its model's vocabulary plus added tokens), at most MAX_VOCAB
    (issue 49: 2M entries once ended in an allocator traceback). Counted first without parsing
    (data/vocab_count.py): a file over the bound is refused in a fraction of a second instead of after a
    full parse (~4 s of CPU at 2M entries); the others are parsed by the bounded JSON reader and counted
    from the document, as before."""
    path = Path(name_or_path)
    path = path / "tokenizer.json" if path.is_dir() else path
    if path.name != "tokenizer.json" or not path.is_file():
        return
    raw = read_bounded(path, MAX_JSON_BYTES, "a JSON file tlm reads")
    n = count_entries(raw)
    if n is None or n <= MAX_VOCAB:
        n = _parsed_entries(loads_bounded(raw, str(path)))
    if n > MAX_VOCAB:
        raise UserError(f"{path} holds {n:,} vocabulary entries, more than the {MAX_VOCAB:,} tlm reads: not "
                        "a tokenizer to train or probe with")


def _parsed_entries(doc) -> int:
    model = doc.get("model") if isinstance(doc, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    added = doc.get("added_tokens") if isinstance(doc, dict) else None
    n_added = len(added) if isinstance(added, list) else 0
    return (len(vocab) if isinstance(vocab, dict | list) else 0) + n_added


def load_hf_tokenizer(name_or_path: str) -> HFTokenizer:
    from transformers import AutoTokenizer

    from tlm_probe import register_with_transformers

    check_vocab_size(name_or_path)

    register_with_transformers()  # a tlm run folder's byte tokenizer loads through AutoTokenizer
    try:
        tok = AutoTokenizer.from_pretrained(name_or_path)
    except Exception as e:  # missing folder, offline hub, unknown name
        raise UserError(f"cannot load tokenizer {name_or_path!r}: {str(e).splitlines()[0]}") from None
    if not getattr(tok, "is_fast", False):
        raise UserError(f"tokenizer {name_or_path!r} is not a fast tokenizer")
    return HFTokenizer(tok, "hf", name_or_path)


def read_meta(folder: Path) -> dict:
    """tlm_tokenizer.json of a folder, with a `kind` we know; one line for a corrupt or foreign file."""
    path = folder / TOKENIZER_META
    try:
        meta = read_json(path)
    except UserError as e:
        raise UserError(f"corrupt {path}: {e}") from None
    kind = meta.get("kind") if isinstance(meta, dict) else None
    if kind not in TOKENIZER_KINDS:
        raise UserError(f"{path} names no tokenizer kind of {', '.join(TOKENIZER_KINDS)} "
                        f"(got {repr(kind)[:40]})")
    return meta


def load_saved_tokenizer(folder: str | Path) -> ByteTokenizer | HFTokenizer | None:
    """The tokenizer a run folder or prepared-data folder was made with; None when it records none."""
    folder = Path(folder)
    if not (folder / TOKENIZER_META).is_file():
        return None
    meta = read_meta(folder)
    if meta["kind"] == "byte":
        return ByteTokenizer()
    tok = load_hf_tokenizer(str(folder))
    return HFTokenizer(tok.tok, meta["kind"], meta.get("name", str(folder)))


def parse_bpe(spec: str) -> int | None:
    """The vocab size of a 'bpe' / 'bpe:N' spec, or None when the spec is not a BPE request."""
    if spec != "bpe" and not spec.startswith("bpe:"):
        return None
    _, _, n = spec.partition(":")
    if n and not n.isdigit():
        raise UserError(f"bad tokenizer spec {spec!r}: expected bpe:VOCAB_SIZE")
    return int(n) if n else DEFAULT_BPE_VOCAB


def make_tokenizer(spec: str, train_texts: Iterable[str] | None = None):
    """Build the tokenizer named by `spec`; a BPE is trained on `train_texts` (the training split)."""
    if spec == "byte":
        return ByteTokenizer()
    vocab = parse_bpe(spec)
    if vocab is not None:
        if train_texts is None:
            raise UserError("a BPE tokenizer needs training text")
        return train_bpe(train_texts, vocab)
    saved = load_saved_tokenizer(spec) if Path(spec).is_dir() else None
    return saved if saved is not None else load_hf_tokenizer(spec)
