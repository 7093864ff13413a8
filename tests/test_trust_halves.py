"""`tlm trust`'s halves judged before the model loads (trust/halves.py, issue 49): the number of sequences a
token file gives equals what the probe's own cutting yields (data/sequences.py), and a corpus of one
sequence is refused with the probe's line; what cannot be judged from a header is left to the probe."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlm_probe.errors import UserError
from tlm_probe.trust.halves import check_halves, sequences


@settings(max_examples=150, deadline=None, derandomize=True)
@given(rows=st.integers(1, 5), length=st.integers(1, 40), two_d=st.booleans(), seq_len=st.integers(2, 50),
       max_tokens=st.integers(0, 250))
def test_the_count_is_the_probes_own_cutting(rows, length, two_d, seq_len, max_tokens):
    from tlm_probe.data.sequences import _id_chunks, limit_tokens

    shape = (rows, length) if two_d else (rows * length,)
    if two_d and seq_len > length:
        return  # the probe refuses these (a row is never packed with the next)
    ids = np.ones(shape, dtype=np.uint32)
    cut = list(limit_tokens(_id_chunks(ids, seq_len, 2, "x"), max_tokens or None))
    assert sequences(shape, seq_len, max_tokens) == len(cut)


def _folder(tmp_path, context: int | None):
    folder = tmp_path / "m"
    folder.mkdir()
    config = {"model_type": "tlm", "vocab_size": 64} | ({"max_seq_len": context} if context else {})
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def _ids(tmp_path, name, shape):
    path = tmp_path / name
    np.save(path, np.ones(shape, dtype=np.uint32))
    return str(path)


@pytest.mark.parametrize(("shape", "seq_len", "max_tokens", "context", "refused"), [
    ((1, 32), 0, 0, None, True),  # one row: one sequence
    ((2, 32), 0, 0, None, False),
    ((1, 32), 16, 0, None, False),  # two sequences of 16
    ((1, 32), 16, 16, None, True),  # --max-tokens keeps one (of every corpus)
    ((8,), 0, 0, 8, True),  # a stream of 8 at the model's context of 8
    ((9,), 0, 0, 8, False),
    ((8,), 0, 0, None, False),  # no context in config.json: the probe judges
    ((1, 32), 64, 0, None, False),  # --seq-len longer than a row: the probe's own refusal
])
def test_a_corpus_of_one_sequence_is_refused_before_loading(tmp_path, shape, seq_len, max_tokens, context,
                                                            refused):
    model = _folder(tmp_path, context)
    data = (_ids(tmp_path, "many.npy", (4, 32)), _ids(tmp_path, "c.npy", shape))
    if refused:
        with pytest.raises(UserError, match=r"half b of .*[.]npy holds no sequence.*--no-halves"):
            check_halves(model, data, seq_len, max_tokens)
    else:
        check_halves(model, data, seq_len, max_tokens)


def test_text_and_unreadable_files_are_left_to_the_probe(tmp_path):
    (tmp_path / "t.txt").write_text("x")
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    check_halves(_folder(tmp_path, 8), (str(tmp_path / "t.txt"), str(tmp_path / "bad.npy"), "builtin:pydoc"),
                 0, 0)
