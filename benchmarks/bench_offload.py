"""Probing a model larger than memory: peak memory against the model's size, and the slowdown of offload.

    python -m benchmarks.bench_offload [--rounds N] [--quick]

A random Llama (6 x 768, vocabulary 32k: 350 MiB of float32 weights) is probed in fresh processes, on
one device and dispatched with `--device-map auto --max-memory cpu=CAP` (CAP 60% of the weights: the
embedding stays in memory, the blocks and the head go to disk), the two arms interleaved and rotated.
Each process reports its peak resident memory above what it held after its imports (VmHWM, reset then),
the anonymous part of its resident memory after the stream (what the system cannot reclaim; the pages of
mapped weight files it can), and the load's and the stream's seconds by wall and by CPU clock; printed:
each against the weights' size, and offloaded / one device. The offload folder is on the local disk, so
its reads come from the page cache when memory allows: offload's cost on a machine with free memory, not
on a slow disk.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.timing import Times, interleaved, line, ratio, spread

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("one device", "offloaded")

CHILD = """
import json, sys, time
import torch
from tlm_probe.capture import load_probe_model
from tlm_probe.api.library import probe
torch.set_num_threads(1)
folder, ids, cap = sys.argv[1:4]
kw = {"device_map": "auto", "max_memory": cap} if cap else {}
def status(key):  # MiB, from /proc/self/status (Linux: kB)
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key + ":")) / 1024
now = lambda: (time.perf_counter(), time.process_time())
open("/proc/self/clear_refs", "w").write("5")  # the peak so far (the imports') forgotten: VmHWM = VmRSS
start, anon, t0 = status("VmRSS"), status("RssAnon"), now()
pm = load_probe_model(folder, "cpu", **kw)
t1 = now()
res = probe(pm, ids, seq_len=128, batch_size=4, max_tokens=None, full=True, **kw)
t2 = now()
print(json.dumps({"peak_mib": status("VmHWM") - start, "anon_mib": status("RssAnon") - anon,
                  "load": [t1[i] - t0[i] for i in (0, 1)],
                  "stream": [t2[i] - t1[i] for i in (0, 1)],
                  "placed": res.provenance.get("dispatch", {}).get("placed")}))
"""


def llama(folder: Path, layers: int, d_model: int, vocab: int) -> int:
    """A random Llama saved as safetensors; returns its weights' bytes."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=d_model, intermediate_size=d_model * 8 // 3 // 64 * 64,
                      num_hidden_layers=layers, num_attention_heads=d_model // 64,
                      max_position_embeddings=256)
    LlamaForCausalLM(cfg).eval().save_pretrained(folder)
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def run(rounds: int, size: tuple[int, int, int], batches: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "llama"
        weights = llama(folder, *size)
        ids = Path(tmp) / "ids.npy"
        np.save(ids, np.random.default_rng(0).integers(0, size[2], (4 * batches, 128)).astype(np.uint32))
        cap = f"cpu={int(weights * 0.6)}"  # the embedding fits; the blocks and the head go to disk
        docs: dict[str, list[dict]] = {a: [] for a in ARMS}

        def arm(name: str):
            def go():
                env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
                cmd = [sys.executable, "-c", CHILD, str(folder), str(ids), cap if name == "offloaded" else ""]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT, env=env)
                docs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))

            return go

        interleaved({a: arm(a) for a in ARMS}, rounds, warmup=0)
    return report(docs, weights, cap)


def report(docs: dict[str, list[dict]], weights: int, cap: str) -> dict:
    mib = weights / 2**20
    out: dict = {"weights_mib": round(mib, 1), "max_memory": cap, "placed": docs["offloaded"][0]["placed"]}
    for a in ARMS:
        out[f"{a}: peak RSS above start-up / weights"] = spread([d["peak_mib"] / mib for d in docs[a]])
        out[f"{a}: anonymous RSS after the stream / weights"] = spread([d["anon_mib"] / mib for d in docs[a]])
    for phase in ("load", "stream"):
        wall, cpu = ({a: [d[phase][c] for d in docs[a]] for a in ARMS} for c in (0, 1))
        t = Times(wall, cpu)
        out[f"{phase}: offloaded / one device"] = ratio(t, "offloaded", "one device")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="a 2 x 256 model, 3 rounds: a smoke run")
    args = ap.parse_args()
    size, rounds = ((2, 256, 8192), 3) if args.quick else ((6, 768, 32000), args.rounds)
    res = run(rounds, size, 2)
    print(f"weights {res['weights_mib']} MiB, --max-memory {res['max_memory']}, placed {res['placed']}")
    for k, v in res.items():
        if isinstance(v, dict) and "median" in v:
            print(line(k, v))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
