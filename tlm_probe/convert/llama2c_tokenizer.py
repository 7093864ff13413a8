"""llama2.c tokenizers as SentencePiece models: a `tok*.bin` (what run.c reads) is rebuilt into the
SentencePiece BPE model it was exported from; a SentencePiece `.model` is taken as it is.

tok*.bin layout: int32 max_token_length, then per token: float32 merge score, int32 byte length, the bytes.
llama2.c's export wrote SentencePiece's pieces with '▁' turned into ' ', BOS and EOS as '\\n<s>\\n' and
'\\n</s>\\n', and byte-fallback pieces as '<0xHH>'; reading it back undoes that. The normaliser is the one
karpathy's `tinystories.py train_vocab` trains with (rule "identity", SentencePiece's defaults otherwise:
a dummy space prefix, runs of spaces collapsed) and BPE merges by score, as run.c's encoder does.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

from tlm_probe.errors import UserError

SPECIAL = {"<unk>": "UNKNOWN", "\n<s>\n": "CONTROL", "\n</s>\n": "CONTROL"}
BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")
MAX_PIECE = 1 << 16


def read_tok_bin(path: Path, vocab_size: int) -> list[tuple[str, float]]:
    """(piece text as stored, score) for each of the vocab_size tokens of a tok*.bin."""
    data = path.read_bytes()
    if len(data) < 4:
        raise UserError(f"{path} is too short to be a llama2.c tokenizer")
    (max_len,) = struct.unpack_from("<i", data, 0)
    at, out = 4, []
    while at < len(data) and len(out) <= vocab_size:
        if at + 8 > len(data):
            raise UserError(f"{path}: truncated after {len(out)} tokens")
        score, n = struct.unpack_from("<fi", data, at)
        if not 0 <= n <= min(max_len, MAX_PIECE) or at + 8 + n > len(data):
            raise UserError(f"{path}: token {len(out)} has a bad length {n}: not a llama2.c tokenizer")
        out.append((data[at + 8:at + 8 + n].decode("utf-8", errors="strict"), score))
        at += 8 + n
    if len(out) != vocab_size:
        held = f"{len(out)}" if len(out) < vocab_size else f"more than {vocab_size}"
        raise UserError(f"{path} holds {held} tokens, the model has {vocab_size}: they do not belong "
                        "together")
    return out


def sentencepiece_model(tokens: list[tuple[str, float]]) -> bytes:
    """A serialised SentencePiece BPE ModelProto with these pieces (ids kept)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    m = pb.ModelProto()
    kinds = pb.ModelProto.SentencePiece.Type
    byte_fallback = False
    for text, score in tokens:
        p = m.pieces.add()
        p.score = score
        if text in SPECIAL:
            p.piece, p.type = text.strip(), kinds.Value(SPECIAL[text])
        elif BYTE_PIECE.fullmatch(text):
            p.piece, p.type, byte_fallback = text, kinds.Value("BYTE"), True
        else:
            p.piece, p.type = text.replace(" ", "\u2581"), kinds.Value("NORMAL")
    t = m.trainer_spec
    t.model_type, t.vocab_size, t.byte_fallback = pb.TrainerSpec.BPE, len(tokens), byte_fallback
    t.unk_id, t.bos_id, t.eos_id, t.pad_id = 0, 1, 2, -1
    m.normalizer_spec.name = "identity"
    return m.SerializeToString()


def load_tokenizer_model(path: Path, vocab_size: int) -> bytes:
    """SentencePiece model bytes from a .model file or a llama2.c tok*.bin, checked to hold vocab_size pieces
    with <unk>, <s>, </s> at ids 0, 1, 2 (what the checkpoint was trained with)."""
    import sentencepiece as spm

    if not path.is_file():
        raise UserError(f"tokenizer not found: {path}")
    blob = path.read_bytes() if path.suffix == ".model" else sentencepiece_model(read_tok_bin(path,
                                                                                              vocab_size))
    sp = spm.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(blob)
    except Exception as e:  # a file that is no SentencePiece model
        raise UserError(f"{path} is not a SentencePiece model ({type(e).__name__})") from None
    if sp.GetPieceSize() != vocab_size:
        raise UserError(f"{path} has {sp.GetPieceSize()} pieces, the model has {vocab_size}")
    if (sp.unk_id(), sp.bos_id(), sp.eos_id()) != (0, 1, 2):
        raise UserError(f"{path}: <unk>, <s>, </s> are not ids 0, 1, 2 as llama2.c expects")
    return blob


def write_hf_tokenizer(blob: bytes, folder: Path) -> None:
    """tokenizer.model plus transformers' own files (tokenizer.json converted from it by LlamaTokenizer)."""
    from transformers import AutoTokenizer

    (folder / "tokenizer.model").write_bytes(blob)
    (folder / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", '
        '"unk_token": "<unk>", "add_bos_token": true, "add_eos_token": false, "legacy": false}\n')
    tok = AutoTokenizer.from_pretrained(str(folder))
    spec = _spec(blob)  # transformers' Llama conversion leaves these two SentencePiece settings out
    if spec.normalizer_spec.remove_extra_whitespaces:
        _collapse_spaces(tok.backend_tokenizer)
    if not spec.trainer_spec.byte_fallback:  # a character outside the vocabulary is <unk>, as in training
        tok.backend_tokenizer.model.byte_fallback = False
        tok.backend_tokenizer.model.unk_token = sp_unk(spec)
    tok.save_pretrained(str(folder))
    config = folder / "tokenizer_config.json"  # the generic class loads tokenizer.json as written;
    settings = json.loads(config.read_text())  # LlamaTokenizer would rebuild it without the normaliser
    settings["tokenizer_class"] = "PreTrainedTokenizerFast"
    config.write_text(json.dumps(settings, indent=2) + "\n")


def _spec(blob: bytes):
    from sentencepiece import sentencepiece_model_pb2 as pb

    m = pb.ModelProto()
    m.ParseFromString(blob)
    return m


def _collapse_spaces(backend) -> None:
    """SentencePiece's remove_extra_whitespaces: spaces at either end of the text dropped (\\A, \\z: not at
    line ends), runs of spaces made one. The dummy prefix is then prepended always: with "first", a text
    whose leading spaces were dropped would get none (its first piece no longer starts at offset 0)."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    backend.normalizer = normalizers.Sequence([normalizers.Replace(Regex(r"\A +| +\z"), ""),
                                               normalizers.Replace(Regex(" {2,}"), " ")])
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always",
                                                     split=False)


def sp_unk(spec) -> str:
    return spec.pieces[spec.trainer_spec.unk_id].piece
