"""What each test outcome is made of (issue 44): the share of its scored tokens per distribution of
`builtin:env`, for study 1's outcome (the first 262,144 test tokens), study 2's (1,048,576 tokens in windows
spread over the whole test split, exactly the windows `tlm eval --sample spread --seed 0` scores) and the
whole test split.

    python -m analyses.outcome_coverage DATA_FOLDER    # the prepared builtin:env bpe:2048 folder
        -> analyses/results/confirm2/outcome_coverage.csv (distribution, file count and token share each)

The documents are re-read in the corpus' order with their file paths (data/env_corpus.py's walk) and
tokenized with the prepared tokenizer; the token stream is checked equal to the prepared test split.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from analyses.confirm2 import CONTINUITY_TOKENS, PRIMARY_TOKENS
from tlm_probe.data.env_corpus import env_files
from tlm_probe.data.sources import TEST_PERCENT, split_of
from tlm_probe.data.tokens import load_token_ids
from tlm_probe.data.windows import pick
from tlm_probe.eval.perplexity import window_starts
from tlm_probe.tokenizer import load_saved_tokenizer

OUT = Path(__file__).resolve().parent / "results" / "confirm2" / "outcome_coverage.csv"
SEQ = 128


def test_documents() -> list[tuple[str, str, str]]:
    """(distribution, file, text) of every test document, in corpus order."""
    return [(d, str(p), t) for d, p, t in env_files() if split_of(t, TEST_PERCENT["builtin:env"]) == "test"]


def doc_of_targets(docs, tok, ids: np.ndarray) -> np.ndarray:
    lengths = [len(tok.encode(text)) + 1 for _, _, text in docs]  # + end-of-text
    if sum(lengths) != len(ids):
        raise SystemExit(f"error: re-tokenized test split has {sum(lengths)} ids, the prepared {len(ids)}")
    return np.repeat(np.arange(len(docs)), lengths)


def scored_targets(n_ids: int, max_tokens: int, sample: str) -> np.ndarray:
    """Positions of the scored targets (eval's rule at context = stride = SEQ)."""
    grid = window_starts(n_ids, SEQ, SEQ)
    k = 1 + (max_tokens - SEQ) // SEQ
    starts = np.asarray(grid)[pick(len(grid), k, sample, 0)]
    return (starts[:, None] + np.arange(1, SEQ + 1)).ravel()


def coverage(data: Path) -> pd.DataFrame:
    docs, tok = test_documents(), load_saved_tokenizer(data / "tokenizer")
    ids = np.asarray(load_token_ids(data, "test"))
    owner = doc_of_targets(docs, tok, ids)
    dist = np.array([d for d, _, _ in docs])
    outcomes = {"study1_prefix": scored_targets(len(ids), CONTINUITY_TOKENS, "prefix"),
                "study2_spread": scored_targets(len(ids), PRIMARY_TOKENS, "spread"),
                "whole_split": np.arange(1, len(ids))}
    parts = []
    for name, pos in outcomes.items():
        d = owner[pos]
        t = pd.DataFrame({"distribution": dist[d], "doc": d})
        g = t.groupby("distribution").agg(tokens=("doc", "size"), files=("doc", "nunique"))
        g["share"] = g["tokens"] / len(pos)
        parts.append(g.add_prefix(f"{name}_"))
    table = pd.concat(parts, axis=1).fillna(0).sort_values("whole_split_tokens", ascending=False)
    return table.reset_index()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", type=Path)
    table = coverage(p.parse_args().data)
    table.to_csv(OUT, index=False, float_format="%.6g")
    for name in ("study1_prefix", "study2_spread", "whole_split"):
        used = table[table[f"{name}_tokens"] > 0]
        print(f"{name}: {int(used[f'{name}_files'].sum())} files of {len(used)} distributions; top: " +
              ", ".join(f"{r.distribution} {getattr(r, name + '_share'):.0%}"
                        for r in used.nlargest(5, f"{name}_share").itertuples()))


if __name__ == "__main__":
    main()
