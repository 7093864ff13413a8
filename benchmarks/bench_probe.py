"""Probe speed as like-for-like ratios: hooks and statistics against the same forward pass, peers on the
same batch with the same head, length bucketing on text, and the first batch against a steady one.

    python -m benchmarks.bench_probe [--quick] [--threads 1] [--rounds N]
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import torch

from benchmarks import models, section
from benchmarks import probe_arms as arms
from benchmarks.timing import MIN_ROUNDS, interleaved, line, ratio, spread


def _batch(pm, batch: int, seq: int):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, pm.vocab_size, (batch, seq), generator=g)
    return ids, torch.ones_like(ids)


STREAM = 4
"""Batches per call in the overhead arms: the probe registers its hooks once for its whole stream
(NativeBackend.held), so the arms hold them across a few batches too (registering ~150 hooks costs ~1 ms,
0.2% of a SmolLM2 batch, which a real stream of hundreds of batches does not pay per batch)."""


def overhead(name: str, folder: Path, batch: int, seq: int, rounds: int) -> dict:
    """Blocks only on both sides: hooks alone, and hooks + statistics, against the plain blocks forward,
    STREAM batches per call (hooks held across them, as in the probe's stream)."""
    from tlm_probe.capture import load_probe_model

    pm = load_probe_model(folder)
    ids, mask = _batch(pm, batch, seq)
    stats_s: list[float] = []
    with torch.inference_mode():
        t = interleaved(
            {
                "forward": arms.forward(pm, ids, mask, full=False, stream=STREAM),
                "hooks": arms.hooks_only(pm, ids, mask, full=False, stream=STREAM),
                "probe": arms.native(pm, ids, mask, full=False, stats_seconds=stats_s, stream=STREAM),
            },
            rounds,
        )
    share = [s / f for s, f in zip(stats_s[-rounds:], t["forward"], strict=True)]
    return {
        f"{name}: hooks only / forward (blocks)": ratio(t, "hooks", "forward"),
        f"{name}: probe / forward (blocks)": ratio(t, "probe", "forward"),
        f"{name}: statistics time / forward (blocks)": spread(share),
    }


def peer_models(folder: Path) -> dict:
    """One freshly loaded model per group of arms: the TransformerLens bridge rewrites the model it wraps
    in place (attention implementation, module tree), so a plain forward or tlm_probe on that same object
    would measure TL's model, not the one a user loads (issue 24: TL read ~1.0x tlm that way).
    Groups: "tlm" (plain forward, tlm_probe native, hand-written hooks), "tl" (the bridge), "nnsight"."""
    from tlm_probe.capture import load_probe_model

    out = {group: load_probe_model(folder) for group in ("tlm", "tl", "nnsight")}
    out["bridge"] = arms.tl_bridge(out["tl"])
    return out


def peers(folder: Path, batch: int, seq: int, rounds: int, name: str = "") -> dict:
    """Each group of arms on its own freshly loaded model (peer_models), same batch; ratios are
    peer / tlm_probe with the same head, peers against tlm_probe on the model as loaded. Which arms run
    the LM head: the plain forward, tlm_probe, the hand-written hooks and every TransformerLens arm (TL
    always runs it); the nnsight arm and the tlm_probe it is compared with run the blocks only."""
    m = peer_models(folder)
    pm, tl_pm, bridge = m["tlm"], m["tl"], m["bridge"]
    ids, mask = _batch(pm, batch, seq)
    at = f"{name}: " if name else ""
    with torch.inference_mode():
        fns = {
            "forward": arms.forward(pm, ids, mask, full=True),
            "native": arms.native(pm, ids, mask, full=True),
            "hand": arms.hand_hooks(pm, ids, mask, full=True),
            "tl_forward": arms.tl_forward(bridge, ids, mask),
            "tl_cache": arms.tl_cache_all(bridge, tl_pm, ids, mask),
            "tl_hooks": arms.tl_hooks(bridge, tl_pm, ids, mask),
        }
        t = interleaved(fns, rounds)
    out = {
        f"{at}tlm_probe native / plain forward (with head)": ratio(t, "native", "forward"),
        f"{at}hand-written hooks + stats / tlm_probe (both with head)": ratio(t, "hand", "native"),
        f"{at}TransformerLens forward / plain forward (with head)": ratio(t, "tl_forward", "forward"),
        f"{at}TL run_with_cache (all hooks) + stats / tlm_probe (both with head)":
            ratio(t, "tl_cache", "native"),
        f"{at}TL run_with_hooks (needed hooks) + stats / tlm_probe (both with head)":
            ratio(t, "tl_hooks", "native"),
    }
    key = f"{at}nnsight trace + stats / tlm_probe (both blocks only, no head)"
    try:
        with torch.inference_mode():
            nn_fns = {
                "nnsight": arms.nnsight_blocks(m["nnsight"], ids, mask),
                "native": arms.native(pm, ids, mask, full=False),
            }
            t = interleaved(nn_fns, rounds)
        out[key] = ratio(t, "nnsight", "native")
    except Exception as e:  # noqa: BLE001  (a peer that cannot run here is reported, not fatal)
        out[key] = {"error": str(e).splitlines()[0]}
    return out


def first_batch(folder: Path, batch: int, seq: int, rounds: int) -> dict:
    """A fresh sink's first batch (guardrail additivity check) against a steady batch of the same sink."""
    from tlm_probe.capture import load_probe_model
    from tlm_probe.capture.native import NativeBackend
    from tlm_probe.stats.pieces import TokenIndex

    pm = load_probe_model(folder)
    ids, mask = _batch(pm, batch, seq)
    steady = arms.sink_for(pm)
    steady.batches_done = 1

    def run(sink):
        sink.start_batch(TokenIndex(mask))
        NativeBackend(sink).run(ids, mask)
        sink.end_batch()

    with torch.inference_mode():
        t = interleaved({"first": lambda: run(arms.sink_for(pm)), "steady": lambda: run(steady)}, rounds)
    return {"first batch / steady batch": ratio(t, "first", "steady")}


def bucketing(folder: Path | None, tokens: int, rounds: int) -> dict:
    """MiniLM on builtin:pydoc text: probe time with length bucketing over without; padding shares."""
    if folder is None:
        return {"length bucketing on / off (MiniLM, pydoc text)": {"error": "MiniLM not installed"}}
    from dataclasses import fields

    from tlm_probe.capture import load_probe_model
    from tlm_probe.data import sequences as sq
    from tlm_probe.probe.engine import ProbeOptions, run_probe

    if "length_bucketing" not in {f.name for f in fields(ProbeOptions)}:
        return {"length bucketing on / off (MiniLM, pydoc text)": {"error": "no length bucketing here"}}
    from tlm_probe.data.bucketing import bucket_by_length, padding_fraction

    pm = load_probe_model(folder)
    ids = sq.token_sequences("builtin:pydoc", 256, pm.tokenizer, pm.vocab_size)
    seqs = list(sq.limit_tokens(ids, tokens))
    lengths = [len(s) for s in seqs]
    fns = {
        flag: (lambda flag=flag: run_probe(pm, ProbeOptions(data="builtin:pydoc", max_tokens=tokens,
                                                            length_bucketing=flag == "on")))
        for flag in ("on", "off")
    }
    t = interleaved(fns, rounds, warmup=0)
    return {
        "length bucketing on / off (MiniLM, pydoc text)": ratio(t, "on", "off"),
        "padding share without bucketing": {"value": padding_fraction(lengths, 8)},
        "padding share with bucketing": {"value": padding_fraction(map(len, bucket_by_length(seqs, 8)), 8)},
    }


SIZES = {  # quick (a smoke run: timing.line says so), full: (batch, seq) for the GPT-2 sections, rounds,
    # bucketing tokens
    True: ((4, 128), 5, 4096),
    False: ((8, 256), 15, 32768),
}
NARROW = (8, 256)  # the probe's default batch: narrow models' overhead is measured where a user runs them


def run(quick: bool, workdir: Path, rounds: int | None = None) -> dict:
    (batch, seq), default_rounds, btokens = SIZES[quick]
    rounds = rounds or default_rounds
    floor = 3 if quick else MIN_ROUNDS  # the slower sections run fewer rounds, never below a measurement's
    logging.disable(logging.WARNING)
    gpt2 = models.gpt2(workdir / "gpt2-768", layers=2 if quick else 4, d_model=768)
    out: dict = {}
    targets = [("stories260K-like 5x64", models.stories(workdir / "stories"), NARROW)]
    if models.minilm() is not None:
        targets.append(("MiniLM 6x384", models.minilm(), NARROW))
    targets.append((f"GPT-2 768 wide, {batch}x{seq}", gpt2, (batch, seq)))
    for name, folder, (b, t) in targets:
        out.update(overhead(name, folder, b, t, rounds))
    for name, folder, (b, t) in targets:
        out.update(peers(folder, b, t, max(floor, rounds // 2), name=name))
    out.update(first_batch(gpt2, batch, seq, rounds))
    out.update(bucketing(models.minilm(), btokens, max(floor, rounds // 3)))
    return out


def report(results: dict) -> list[str]:
    lines = []
    for k, v in results.items():
        if "value" in v:
            lines.append(f"  {k:58s} {100 * v['value']:7.1f}%")
        else:
            lines.append(line(k, v))
    return lines


def main() -> None:
    section.main(sys.modules[__name__])


if __name__ == "__main__":
    main()
