"""Fixed costs per run and memory, as ratios: built corpus cached / built, weight hash cached / computed,
`tlm info` (1.3B preset) / `tlm schedule`, `tlm info RUN_FOLDER` / `tlm --help`, training steps with freed
memory kept (tlm_probe/allocator.py) / the system allocator, and peak memory growth above the start-up peak.

    python -m benchmarks.bench_costs [--quick]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks import models, section
from benchmarks.timing import Times, interleaved, line, ratio

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, *args: str, env: dict | None = None) -> str:
    r = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        check=True,
    )
    return r.stdout.strip().splitlines()[-1]


CORPUS = """
import time
from tlm_probe.data import iter_documents
t, c = time.perf_counter(), time.process_time()
n = sum(1 for _ in iter_documents('builtin:pydoc'))
print(time.perf_counter() - t, time.process_time() - c)
"""


def _inner(times: Times, arm: str, printed: str) -> None:
    """A child's own "wall cpu" seconds (timed inside it, after its imports) into times."""
    wall, cpu = map(float, printed.split())
    times[arm].append(wall)
    times.cpu[arm].append(cpu)


def corpus(workdir: Path, rounds: int) -> dict:
    """builtin:pydoc in a fresh process, timed inside it after the imports: with a warm disk cache / with
    the cache off (what every run cost before the cache)."""
    cache = str(workdir / "cache")
    _python(CORPUS, env={"TLM_PROBE_CACHE": cache})  # fills the cache (a no-op where there is none)
    seconds = Times({"cached": [], "built": []}, {"cached": [], "built": []})
    fns = {
        arm: (lambda arm=arm, env=env: _inner(seconds, arm, _python(CORPUS, env={"TLM_PROBE_CACHE": env})))
        for arm, env in (("cached", cache), ("built", "off"))
    }
    interleaved(fns, rounds, warmup=0)
    return {"builtin:pydoc corpus load, cached / built": ratio(seconds, "cached", "built")}


def weight_hash(folder: Path, workdir: Path, rounds: int) -> dict:
    """content_hash of a checkpoint in-process: second call (cache hit) / a fresh hash."""
    os.environ["TLM_PROBE_CACHE"] = str(workdir / "cache")
    try:
        from tlm_probe.files import content_hash as ch
    except ImportError:
        return {"weight hash, cached / computed": {"error": "no hash cache here"}}
    files = ch.weight_files(folder)
    ch.content_hash(folder)
    fns = {"cached": lambda: ch.content_hash(folder), "computed": lambda: ch.hash_files(files)}
    t = interleaved(fns, rounds)
    size = sum(f.stat().st_size for f in files) / 2**20
    return {f"weight hash ({size:.0f} MiB), cached / computed": ratio(t, "cached", "computed")}


def info_vs_schedule(workdir: Path, rounds: int) -> dict:
    from tlm_probe.models.presets import preset_config

    folder = workdir / "tlm-1.3b"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(preset_config("tlm-1.3b").to_dict()))
    cli = str(ROOT / "cli.py")
    run = lambda *a: subprocess.run([sys.executable, cli, *a], capture_output=True, check=True)  # noqa: E731
    config = str(folder / "config.json")  # described without torch (a folder: its weights are read)
    fns = {"info": lambda: run("info", config, "--json"), "schedule": lambda: run("schedule")}
    t = interleaved(fns, rounds)
    return {"tlm info (1.3B preset) / tlm schedule": ratio(t, "info", "schedule")}


def info_folder_vs_help(workdir: Path, rounds: int) -> dict:
    """`tlm info RUN_FOLDER` (config.json + model.safetensors: the weights' names and shapes are checked
    from the safetensors header, models/verify.py) / `tlm --help`, each a fresh process. The goal is <= 3x;
    it was 19x while the check built the model on the meta device (torch, transformer_lens)."""
    from tlm_probe.models.config import TLMConfig
    from tlm_probe.models.io import save_tlm
    from tlm_probe.models.tlm import TaperedLM

    folder = workdir / "info-run"
    if not (folder / "model.safetensors").is_file():
        save_tlm(TaperedLM(TLMConfig()), folder)  # the default 4-layer config: 0.5 MB of weights
    cli = str(ROOT / "cli.py")
    run = lambda *a: subprocess.run([sys.executable, cli, *a], capture_output=True, check=True)  # noqa: E731
    fns = {"info": lambda: run("info", str(folder), "--json"), "help": lambda: run("--help")}
    t = interleaved(fns, rounds)
    return {"tlm info RUN_FOLDER / tlm --help": ratio(t, "info", "help")}


MEMORY = """
import sys, torch, numpy as np
from pathlib import Path
torch.set_num_threads(1)
if sys.argv[3] == "kept":
    from tlm_probe.allocator import keep_freed_memory
    assert keep_freed_memory()
from tlm_probe.capture import load_probe_model
from tlm_probe.api.library import probe
def hwm():
    for l in Path('/proc/self/status').read_text().splitlines():
        if l.startswith('VmHWM:'):
            return int(l.split()[1]) / 1024
pm = load_probe_model(sys.argv[1])
tokens, seq, batch = int(sys.argv[2]), 256, 8
ids = np.random.default_rng(0).integers(0, pm.vocab_size, tokens).astype(np.uint32)
probe(pm, ids[: 2 * seq * batch], seq_len=seq, batch_size=batch, max_tokens=None)  # load + 2 batches
start = hwm()
df = probe(pm, ids, seq_len=seq, batch_size=batch, max_tokens=None)
assert int(df.n_tokens.max()) == tokens
print(hwm() - start)
"""


def memory(folder: Path, small: int, large: int, allocators=("kept", "system")) -> dict:
    """Peak RSS growth (MiB) above the start-up peak (model loaded, two batches probed), in a child; with
    freed memory kept in the process (as `tlm` runs) and with the system allocator's defaults."""
    out = {}
    for how in allocators:
        for n in (small, large):
            grow = float(_python(MEMORY, str(folder), str(n), how, env={"TLM_PROBE_MALLOC": how}))
            out[f"peak RSS growth above start-up, {n:,} tokens, {how} (MiB)"] = {"value_mib": grow}
    return out


STEPS = """
import sys, time, torch
from pathlib import Path
torch.set_num_threads(1)
if sys.argv[1] == "kept":
    from tlm_probe.allocator import keep_freed_memory
    assert keep_freed_memory()
import numpy as np
from benchmarks.bench_train import _config
from tlm_probe.data.stream import TokenData
from tlm_probe.train.loop import Trainer
from tlm_probe.train.run import plan_run
V = 8192  # a real tokenizer's vocabulary: the logits are the largest blocks
ids = np.random.default_rng(0).integers(0, V, size=200_000).astype(np.uint32)
data = TokenData(ids[:190_000], ids[190_000:], None, "random", V)
size = dict(d_model=128, n_layers=4, n_heads=4, d_ff=512, batch_size=8, seq_len=128)
trainer = Trainer(plan_run(_config("uniform", size, 100, 1), Path(sys.argv[2]), data=data, overwrite=True),
                  overwrite=True)
for _ in range(2):
    trainer.train_step()
t, c = time.perf_counter(), time.process_time()
for _ in range(int(sys.argv[3])):
    trainer.train_step()
print(time.perf_counter() - t, time.process_time() - c)
"""


def allocator(workdir: Path, rounds: int, steps: int) -> dict:
    """Training steps in a fresh process: freed memory kept (what `tlm` does) / the system's defaults."""
    seconds = Times({"kept": [], "system": []}, {"kept": [], "system": []})
    fns = {how: (lambda how=how: _inner(seconds, how, _python(STEPS, how, str(workdir / how), str(steps),
                                                              env={"TLM_PROBE_MALLOC": how})))
           for how in seconds}  # fmt: skip
    interleaved(fns, rounds, warmup=0)
    return {"train steps, freed memory kept / system allocator": ratio(seconds, "kept", "system")}


def run(quick: bool, workdir: Path, rounds: int | None = None) -> dict:
    rounds = rounds or (2 if quick else 7)  # quick: a smoke run (timing.line says so)
    gpt2 = models.gpt2(workdir / "gpt2-768", layers=2 if quick else 4, d_model=768)
    out: dict = {}
    out.update(corpus(workdir, rounds))
    out.update(weight_hash(gpt2, workdir, rounds))
    out.update(info_vs_schedule(workdir, rounds))
    out.update(info_folder_vs_help(workdir, rounds))
    sizes = (8_192, 65_536) if quick else (16_384, 524_288)
    allocators = ("kept",) if quick else ("kept", "system")
    out.update(memory(models.stories(workdir / "stories"), *sizes, allocators))
    out.update(allocator(workdir, rounds, 6 if quick else 20))
    return out


def report(results: dict) -> list[str]:
    lines = []
    for k, v in results.items():
        lines.append(f"  {k:58s} {v['value_mib']:+8.1f} MiB" if "value_mib" in v else line(k, v))
    return lines


def main() -> None:
    section.main(sys.modules[__name__])


if __name__ == "__main__":
    main()
