"""The probe's fixed costs: what a call pays besides its forwards, and where a fresh `tlm probe` process
spends its time (start-up imports, model load, tokenisation, the stream, writing the result folder).

    python -m benchmarks.bench_fixed [--quick] [--rounds N]

1. probe() per call on n = 1, 2, 3, 8 batches against n plain forwards (the model with its head, same
   batches), interleaved rotated rounds: the fixed cost per call is what makes the small-n ratios exceed
   the n = 8 one (issue 24's target: gone by the third batch);
   and each batch of one call against a plain forward of the blocks, on the 5x64 Llama and a 768-wide
   GPT-2 (per_batch.py: batches 1, 2, 3 and 4+, and the call's fixed cost);
2. a fresh process running the steps of `tlm probe` (cli -> probe -> write), each phase in multiples of
   one batch's plain forward in the same process (medians over --rounds processes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from benchmarks import models, section
from benchmarks.per_batch import per_batch
from benchmarks.timing import MIN_ROUNDS, interleaved, line, ratio, spread

ROOT = Path(__file__).resolve().parents[1]
BATCH, SEQ = 8, 256

PHASES = """
import json, sys, time
now = lambda: (time.perf_counter(), time.process_time())  # noqa: E731  (wall, this process's CPU)
t0 = now()
import cli  # noqa: F401  (what `tlm` imports before any command runs)
from tlm_probe.probe.engine import ProbeOptions, run_probe
from tlm_probe.results import write_results
t1 = now()
import torch
torch.set_num_threads(1)
from tlm_probe.capture import load_probe_model
from tlm_probe.data import sequences as sq
pm = load_probe_model(sys.argv[1])
t2 = now()
seq = int(sys.argv[4])
seqs = list(sq.token_sequences(sys.argv[2], seq, pm.tokenizer, pm.vocab_size))
t3 = now()
res = run_probe(pm, ProbeOptions(data=sys.argv[2], seq_len=seq, max_tokens=None))
t4 = now()
write_results(sys.argv[3], res.table, res.matrices, res.provenance)
t5 = now()
ids = torch.tensor(seqs[:8])
mask = torch.ones_like(ids)
with torch.inference_mode():
    pm.forward(ids, mask)
    t = now()
    pm.forward(ids, mask)
    fwd = now()
d = lambda a, b: [b[0] - a[0], b[1] - a[1]]  # noqa: E731
print(json.dumps({"imports": d(t0, t1), "model load": d(t1, t2), "tokenisation (alone)": d(t2, t3),
                  "run_probe": d(t3, t4), "write results": d(t4, t5), "one batch forward": d(t, fwd),
                  "batches": (len(seqs) + 7) // 8}))
"""


def _batches(pm, n: int):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, pm.vocab_size, (n * BATCH, SEQ), generator=g)
    return [(ids[i : i + BATCH], torch.ones(BATCH, SEQ, dtype=torch.long)) for i in range(0, len(ids), BATCH)]


def per_call(folder: Path, workdir: Path, counts, rounds: int) -> dict:
    """probe() on n batches / n plain forwards (with head), for each n."""
    from tlm_probe.api.library import probe
    from tlm_probe.capture import load_probe_model

    pm = load_probe_model(folder)
    out = {}
    for n in counts:
        batches = _batches(pm, n)
        path = workdir / f"ids{n}.npy"
        np.save(path, torch.cat([b[0] for b in batches]).numpy().astype(np.uint32))

        def forward(batches=batches):
            with torch.inference_mode():
                for ids, mask in batches:
                    pm.forward(ids, mask)

        def probed(path=path):
            probe(pm, str(path), seq_len=SEQ, max_tokens=None)

        fns = {"probe": probed, "forward": forward}
        out[f"probe() / plain forwards, {n} batch{'es' if n > 1 else ''} of {BATCH}x{SEQ}"] = ratio(
            interleaved(fns, rounds), "probe", "forward"
        )
    return out


def phases(folder: Path, workdir: Path, rounds: int, vocab: int = 512) -> dict:
    """Each phase of a fresh `tlm probe`-like process, in one-batch forwards (median over processes), by
    wall clock and by the process's CPU clock (under "cpu")."""
    data = workdir / "phases.npy"
    np.save(data, np.random.default_rng(0).integers(0, vocab, (2 * BATCH, SEQ)).astype(np.uint32))
    runs = []
    for r in range(rounds):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        cmd = [sys.executable, "-c", PHASES, str(folder), str(data), str(workdir / f"out{r}"), str(SEQ)]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
        if done.returncode:
            raise RuntimeError(f"phase process failed: {done.stderr.strip().splitlines()[-3:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    out = {}
    for key in runs[0]:
        if key in ("one batch forward", "batches"):
            continue
        wall, cpu = ([r[key][c] / r["one batch forward"][c] for r in runs] for c in (0, 1))
        name = f"fresh process, {key} / one batch forward ({runs[0]['batches']} batches)"
        out[name] = {**spread(wall), "cpu": spread(cpu)}
    return out


def run(quick: bool, workdir: Path, rounds: int | None = None) -> dict:
    rounds = rounds or (3 if quick else MIN_ROUNDS)  # quick: a smoke run (timing.line says so)
    stories = models.stories(workdir / "stories")
    out = per_call(stories, workdir, (1, 2, 3) if quick else (1, 2, 3, 8), rounds)
    gpt2 = models.gpt2(workdir / "gpt2-768", layers=2 if quick else 4, d_model=768)  # d >= 512: issue 24
    n = 5 if quick else 6
    out.update(per_batch("stories260K-like 5x64", stories, workdir, n, BATCH, SEQ, rounds))
    out.update(per_batch("GPT-2 768 wide", gpt2, workdir, n, 4, 128, rounds))
    out.update(phases(stories, workdir, rounds))
    return out


def report(results: dict) -> list[str]:
    return [line(k, v) for k, v in results.items()]


def main() -> None:
    section.main(sys.modules[__name__])


if __name__ == "__main__":
    main()
