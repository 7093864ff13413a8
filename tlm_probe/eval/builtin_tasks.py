"""The built-in offline tasks, made from the held-out (validation) split of a corpus (builtin:pydoc by
default), which training never reads, and written as harness task configs (YAML + JSONL):

- pydoc-mc: a sentence of a held-out document, then 4 candidates for the next one: the true next sentence
  and 3 sentences drawn from other held-out documents (acc, acc_norm).
- pydoc-lastword (LAMBADA-style): a paragraph of a held-out document cut just after its last plain word
  (within the first 64 words); the model must predict that word (acc: greedy hit; perplexity of it).

The documents come in the corpus's fixed order and every draw uses numpy's default_rng([seed, doc]), so
the files are the same on every machine for the same Python stdlib and seed. The YAML templates ship in
task_configs/; only the path of the data file is filled in.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tlm_probe.data.sources import iter_documents
from tlm_probe.errors import UserError
from tlm_probe.registry import Registry

TEMPLATES = Path(__file__).parent / "task_configs"
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'`])")
PLAIN_WORD = re.compile(r"[A-Za-z]{3,}")
SENTENCE_CHARS = (20, 200)
PAIRS_PER_DOC = 3
"""At most this many (sentence, next sentence) items per document, so long documents do not dominate."""
LASTWORD_MIN_CONTEXT, LASTWORD_MAX_WORDS = 8, 64
N_CHOICES = 4


def _sentences(doc: str) -> list[str]:
    text = " ".join(doc.split())
    return [s for s in SENTENCE_END.split(text) if SENTENCE_CHARS[0] <= len(s) <= SENTENCE_CHARS[1]]


def build_mc(docs: list[str], seed: int) -> list[dict]:
    per_doc = [_sentences(d) for d in docs]
    pool = [(i, s) for i, sents in enumerate(per_doc) for s in sents]
    items = []
    for i, sents in enumerate(per_doc):
        others = [s for j, s in pool if j != i]
        if len(others) < N_CHOICES - 1:
            continue
        rng = np.random.default_rng([seed, i])
        for k in range(1, min(len(sents), PAIRS_PER_DOC + 1)):
            wrong = [others[j] for j in rng.choice(len(others), N_CHOICES - 1, replace=False)]
            label = int(rng.integers(N_CHOICES))
            choices = wrong[:label] + [sents[k]] + wrong[label:]
            items.append({"doc": i, "context": sents[k - 1], "choices": choices, "label": label})
    return items


def build_lastword(docs: list[str], seed: int) -> list[dict]:
    items = []
    for i, doc in enumerate(docs):
        for para in doc.split("\n\n"):
            words = para.split()[:LASTWORD_MAX_WORDS]
            last = max((j for j, w in enumerate(words) if PLAIN_WORD.fullmatch(w)), default=-1)
            if last >= LASTWORD_MIN_CONTEXT:
                items.append({"doc": i, "context": " ".join(words[:last]), "target": words[last]})
    return items


TASKS: Registry[Callable[[list[str], int], list[dict]]] = Registry("built-in task", {
    "pydoc-mc": build_mc,
    "pydoc-lastword": build_lastword,
})
"""The offline tasks `tlm eval` writes as lm-evaluation-harness task YAML: name -> (docs, seed) -> items."""


def write_task(name: str, folder: Path, source: str = "builtin:pydoc", seed: int = 0) -> dict:
    """Write FOLDER/NAME.jsonl and FOLDER/NAME.yaml; returns {name, yaml, data, n_docs, sha256s}."""
    docs = list(iter_documents(source, "val"))
    items = TASKS[name](docs, seed)
    if not items:
        raise UserError(f"the validation split of {source} yields no {name} items")
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / f"{name}.jsonl"
    data.write_text("".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items))
    template = (TEMPLATES / f"{name}.yaml").read_text()
    config = folder / f"{name}.yaml"
    # a JSON string is a valid YAML scalar: no quoting rules to get wrong for odd paths
    config.write_text(template + f"dataset_kwargs:\n  data_files:\n    test: {json.dumps(str(data))}\n")
    return {
        "task": name,
        "source": source,
        "split": "val",
        "seed": seed,
        "n_docs": len(items),
        "config_sha256": _sha(template.encode()),
        "data_sha256": _sha(data.read_bytes()),
    }


def _sha(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()
