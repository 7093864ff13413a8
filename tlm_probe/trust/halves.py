"""Can each corpus of `tlm trust` be split into two halves (every other sequence)? Judged before the model
loads (issue 49): a corpus of one sequence was found to have an empty half b only after the model loaded
and every corpus before it was probed in full. For a token file (.npy, .tok) the number of sequences follows
from its shape, --seq-len (or the model's context, from config.json) and --max-tokens, as the probe cuts
them (data/sequences.py). Text, other token files and models without a readable context are judged once the
model (its tokenizer) has loaded and before any corpus is probed (check_halves_read: the first sequences of
each half, cut as the probe cuts them); before, an empty half was found after every corpus before it had been
probed in full."""

from __future__ import annotations

import math
from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.probe.options import DEFAULT_SEQ_LEN

POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len")
"""Where a config.json gives the model's context (capture/inputs.py max_positions reads the same)."""


def no_sequence(half: str, corpus: str) -> UserError:
    """The one message for a half with no sequence."""
    return UserError(f"half {half} of {corpus} holds no sequence (each half takes every other sequence of "
                     "the probed tokens): give more --max-tokens, or --no-halves")


def sequences(shape: tuple[int, ...], seq_len: int, max_tokens: int) -> int:
    """How many sequences the probe cuts from token ids of `shape` (1-D: one stream; 2-D: rows cut apart),
    `seq_len` tokens each, stopping after `max_tokens` tokens (0: all)."""
    rows, length = (1, shape[0]) if len(shape) == 1 else shape
    per_row = math.ceil(length / seq_len)
    if not max_tokens or max_tokens >= rows * length:
        return rows * per_row
    full, rest = divmod(max_tokens, length)
    return full * per_row + math.ceil(rest / seq_len)


def _shape(corpus: str) -> tuple[int, ...] | None:
    """The shape of a token file's ids, read from its header alone; None for anything else."""
    path = Path(corpus)
    if not path.is_file():
        return None
    try:
        if path.suffix == ".npy":
            import numpy as np

            return tuple(np.load(path, mmap_mode="r", allow_pickle=False).shape)
        if path.suffix == ".tok":
            from tlm_probe.data.tokens import read_shard_header

            return (int(read_shard_header(path)["n_tokens"]),)
    except (UserError, OSError, ValueError):
        return None  # the probe's reader says what is wrong with it
    return None


def _context(model: str) -> int | None:
    """The default sequence length for `model`: DEFAULT_SEQ_LEN or its context if shorter (None when
    its config.json does not say)."""
    from tlm_probe.capture.adapters import known_adapter
    from tlm_probe.models.config_file import read_config_json

    if not (Path(model) / "config.json").is_file():
        return None
    try:
        config = read_config_json(Path(model))
    except UserError:
        return None
    value = next((config[k] for k in POSITION_KEYS if isinstance(config.get(k), int)), None)
    offset = getattr(known_adapter(config.get("model_type")), "position_offset", 0)
    return None if value is None else min(DEFAULT_SEQ_LEN, value - offset)


def check_halves(model: str, data: tuple[str, ...], seq_len: int, max_tokens: int) -> None:
    """Refuse a token-file corpus that gives fewer than two sequences (half b empty) before anything loads."""
    for corpus in data:
        shape = _shape(corpus)
        if shape is None or len(shape) not in (1, 2) or 0 in shape:
            continue
        length = seq_len or (shape[1] if len(shape) == 2 else _context(str(model)))
        if not length or length < 2 or (len(shape) == 2 and length > shape[1]):
            continue  # unknown, or refused by the probe with its own message
        if sequences(shape, length, max_tokens) < 2:
            raise no_sequence("b", corpus)


def check_halves_read(pm, data: tuple[str, ...], options) -> None:
    """Refuse a corpus with an empty half before any corpus is probed: each half's first sequence, cut by
    the probe's own reader from `options` (ProbeOptions; its data and half replaced), tokenizing no more
    of the corpus than that takes."""
    from dataclasses import replace

    from tlm_probe.probe.stream import read_sequences

    for corpus in data:
        if _shape(corpus) is not None:
            continue  # a .npy or .tok file: judged from its header before the load (check_halves)
        for half in "ab":
            _, seqs = read_sequences(pm, replace(options, data=corpus, half=half), pm.path or pm.name)
            if next(iter(seqs), None) is None:
                raise no_sequence(half, corpus)
