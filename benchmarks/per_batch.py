"""probe() batch by batch: each batch of one call against a plain forward of the blocks on that batch.

issue 24's targets: the default statistics cost at most 1.03x a plain forward of the blocks at d >= 512
(1.10x on tiny models), and a per-call fixed cost that is gone by the third batch. One probe() call on n
batches is timed from inside: a stamp each time the probe's batcher (data.sequences.batches) hands out
a batch and when it runs dry, so batch k's time is everything the call does between handing out batch k and
batch k+1 (the forward with hooks, the statistics, the guardrails, the next batch's padding, the token
count). What is left of the call's time (reading the data, building the sinks, the tables and provenance)
is its fixed cost, given in one batch's forwards. The forward arm times each batch's `forward_base` (the
blocks: what the probe runs for the default statistics), in the same rounds (interleaved, rotated).
"""

from __future__ import annotations

import statistics
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from benchmarks.timing import CLOCKS, interleaved, spread

# Both clocks at every stamp (benchmarks/timing.py): wall time, and the process's CPU time (every thread,
# torch's workers too), which on a loaded machine leaves out the waits for a core.


def _now() -> np.ndarray:
    return np.array([clock() for clock in CLOCKS.values()])


@contextmanager
def stamped_batches(stamps: list):
    """data.sequences.batches, stamping both clocks at each batch handed out and at the end."""
    from tlm_probe.data import sequences as sq

    real = sq.batches

    def batches(*args, **kwargs):
        for b in real(*args, **kwargs):
            stamps.append(_now())
            yield b
        stamps.append(_now())

    sq.batches = batches
    try:
        yield
    finally:
        sq.batches = real


def per_batch(name: str, folder: Path, workdir: Path, n: int, batch: int, seq: int, rounds: int) -> dict:
    """Ratios probe batch k / one batch's forward for k = 1, 2, 3 and the median over k >= 4, and the
    call's fixed cost in one batch's forwards, by each clock; per round (the forward: that round's median
    over its n batches, all the same shape), then median [min, max] over rounds."""
    from tlm_probe.api.library import probe
    from tlm_probe.capture import load_probe_model

    pm = load_probe_model(folder)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, pm.vocab_size, (n * batch, seq), generator=g)
    path = workdir / f"{name.replace(' ', '_')}_{n}x{batch}x{seq}.npy"
    np.save(path, ids.numpy().astype(np.uint32))
    ones = torch.ones(batch, seq, dtype=torch.long)
    chunks = [(ids[i : i + batch], ones) for i in range(0, len(ids), batch)]
    got: dict[str, list] = {"probe": [], "forward": []}

    def probed():
        stamps: list = []
        t0 = _now()
        with stamped_batches(stamps):
            probe(pm, str(path), seq_len=seq, max_tokens=None, batch_size=batch)
        total = _now() - t0
        each = np.diff(np.stack(stamps), axis=0)  # (n, clocks)
        got["probe"].append((each, total - each.sum(0)))

    def forward():
        each = []
        with torch.inference_mode():
            for x, m in chunks:
                t = _now()
                pm.forward_base(x, m)
                each.append(_now() - t)
        got["forward"].append(np.stack(each))

    interleaved({"probe": probed, "forward": forward}, rounds)
    out = {}
    for c, clock in enumerate(CLOCKS):
        # per round after the warm-up one: (probe's batch times, its fixed cost, one batch's forward: the
        # median of the forward arm's n batches)
        pairs = zip(got["probe"][1:], got["forward"][1:], strict=True)
        per = [(p[:, c], cost[c], float(np.median(f[:, c]))) for (p, cost), f in pairs]
        at = f"{name}, probe() on {n} batches of {batch}x{seq}, {clock} time"
        for k in (1, 2, 3):
            out[f"{at}: batch {k} / blocks forward"] = spread([p[k - 1] / f for p, _, f in per])
        out[f"{at}: batches 4+ / blocks forward"] = spread([statistics.median(p[3:]) / f for p, _, f in per])
        out[f"{at}: fixed cost / one blocks forward"] = spread([cost / f for _, cost, f in per])
    return out
