"""TransformerLens habits on our model (issue 22): run_with_cache returns an ActivationCache, as
HookedTransformer does, so shorthand keys and accumulated_resid work; the plain dict stays available.
Expected values come from the plain dict of the same forward (a different code path: TL's caching hooks
without the ActivationCache wrapper), compared exactly because they are the same tensors."""

from __future__ import annotations

import torch
from transformer_lens import ActivationCache

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.tlm import TaperedLM


def _model():
    torch.manual_seed(0)
    return TaperedLM(TLMConfig(d_model=32, n_layers=3, n_heads=2, d_ff=(96, 64, 32), max_seq_len=32,
                               vocab_size=64)).eval()


def test_run_with_cache_is_an_activation_cache():
    model, ids = _model(), torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(1))
    logits, cache = model.run_with_cache(ids)
    _, plain = model.run_with_cache(ids, return_cache_object=False)
    assert isinstance(cache, ActivationCache) and isinstance(plain, dict)
    assert torch.equal(cache["resid_post", 0], plain["blocks.0.hook_resid_post"])
    assert torch.equal(cache["resid_pre", -1], plain["blocks.2.hook_resid_pre"])  # negative layer index
    assert torch.equal(cache["blocks.1.mlp.hook_pre"], plain["blocks.1.mlp.hook_pre"])
    stream = cache.accumulated_resid()  # (n_layers + 1, B, T, d): each block's input, then the output
    expected = torch.stack([plain[f"blocks.{l}.hook_resid_pre"] for l in range(3)]
                           + [plain["blocks.2.hook_resid_post"]])
    assert torch.equal(stream, expected)
    assert logits.shape == (2, 10, 64)
