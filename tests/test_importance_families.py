"""Importance statistics on families of issue 20 against an independent computation: the NLL increase of
zero-ablating each layer's MLP (ablation_dnll_mlp_zero) on a mixture of experts (mixtral, qwen2_moe with its
gated shared expert) and on Gemma 2 (sandwich norms: the probe zeroes the post-feedforward norm's output).

The reference knows nothing of the adapter table or the importance code: a float64 copy of the model, one
unpadded sequence at a time, the next-token NLL from F.cross_entropy, and a forward hook written here that
zeroes the output of the layer's `mlp` module (for Gemma 2 the norm after it then returns 0 as well:
RMSNorm(0) = 0), from the modeling files.

Tolerance: each per-token NLL is about log V = 5.8 (random tiny models), computed by the probe in float32;
its logits carry relative errors of a few float32 eps (1.2e-7) per operation over 3 layers, so each NLL is
off by at most ~8 eps x 5.8 = 6e-6 and a difference of two by 1.2e-5; a token mean cannot exceed that.
2e-5 leaves a factor ~2; a wrong ablation target (the MLP's output before Gemma 2's norm and after it give
the same zero, but a wrong layer or the router alone) moves the value by 1e-3 or more.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from families_zoo import FAMILY_MODELS, build_family
from models_zoo import CORPUS

from tlm_probe.capture import load_probe_model
from tlm_probe.data.sequences import token_sequences
from tlm_probe.probe.engine import ProbeOptions, run_probe

SEQ_LEN = 16
TOL = 2e-5
VARIANTS = ("mixtral", "qwen2_moe", "gemma2")


def _zero_first(module, args, out):
    if isinstance(out, torch.Tensor):
        return torch.zeros_like(out)
    return (torch.zeros_like(out[0]), *out[1:])


def _nll(model, ids: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids, use_cache=False).logits[0, :-1]
    return F.cross_entropy(logits, ids[0, 1:], reduction="none")


def reference_dnll(variant: str, folder, sequences) -> tuple[list[float], int]:
    """Per layer: mean over all predicted tokens of NLL(MLP of that layer zeroed) - NLL(clean)."""
    kw = {"experts_implementation": "eager"} if variant != "gemma2" else {}  # grouped_mm has no float64
    model = FAMILY_MODELS[variant][1].from_pretrained(folder, dtype=torch.float64, **kw).eval()
    layers = model.model.layers
    sums, n = np.zeros(len(layers)), 0
    with torch.no_grad():
        for seq in sequences:
            ids = torch.tensor([seq])
            clean = _nll(model, ids)
            n += clean.numel()
            for l, layer in enumerate(layers):
                handle = layer.mlp.register_forward_hook(_zero_first)
                try:
                    sums[l] += float((_nll(model, ids) - clean).sum())
                finally:
                    handle.remove()
    return list(sums / n), n


def _louder(variant: str, folder) -> None:
    """Random-init MLPs (weights of std 0.02) barely change the NLL (1e-5): scaled x6 every MLP matters
    (|dNLL| of 1e-3 to 2e-2; Gemma 2 normalises the MLP output, so its layers stay at 5e-4 to 6e-3), so a
    wrong layer or target cannot hide within the tolerance."""
    model = FAMILY_MODELS[variant][1].from_pretrained(folder).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            for p in layer.mlp.parameters():
                if p.ndim > 1:
                    p.mul_(6.0)
    model.save_pretrained(folder)


@pytest.mark.parametrize("variant", VARIANTS)
def test_zero_ablation_dnll_matches_an_independent_computation(tmp_path, variant):
    folder = build_family(variant, tmp_path / variant)
    _louder(variant, folder)
    pm = load_probe_model(folder)
    opts = ProbeOptions(data=CORPUS, stats="ablation_dnll_mlp_zero", seq_len=SEQ_LEN, max_tokens=None)
    table = run_probe(pm, opts).table.sort_values("layer")
    seqs = list(token_sequences(CORPUS, SEQ_LEN, pm.tokenizer, pm.vocab_size))
    expect, n = reference_dnll(variant, folder, seqs)
    assert list(table.n_tokens) == [n] * pm.n_layers
    worst = float(np.abs(table.value.to_numpy() - np.array(expect)).max())
    print(f"ablation_dnll_mlp_zero {variant}: max |probe - reference| {worst:.1e}, values {expect}")
    assert worst <= TOL, (variant, worst)
    assert min(abs(v) for v in expect) > 10 * TOL  # every MLP matters: the check can fail
