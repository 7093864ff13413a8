"""Hope-attention's continuum memory (models/cms.py, cms_update.py): the chunk-parallel in-context update
equals a token-by-token reference (autograd inner gradients, per-token weights) in forward and in every
gradient, in float64; a chunk's update reaches only later chunks; the whole model equals its reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from swap_check import same_loss_and_grads

import tlm_probe.models.cms_update as cms_update
from tlm_probe.models.cms_update import read_chunked, read_reference
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.tlm import TaperedLM

pytestmark = pytest.mark.usefixtures("one_thread")
# float64: both paths sum the same ~T·d_l products in different orders; 1e-10 leaves 10^5 x eps64 (2.2e-16)
# for the T/C chained updates, far below any real disagreement (a wrong chunk boundary moves outputs ~1e-2)
TOL64 = 1e-10


def _inputs(kind, N=3, T=13, d=6, d_l=10):
    g = torch.Generator().manual_seed(0)

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).requires_grad_()

    # weights ~ 1/sqrt(fan-in), unit inputs: O(1) outputs, and updates that move them by O(0.1)
    W0 = [r(d_l, d, scale=d**-0.5) for _ in range(2 if kind == "swiglu" else 1)]
    W0.append(r(d, d_l, scale=d_l**-0.5))
    x = F.normalize(torch.randn(N, T, d, generator=g, dtype=torch.float64), dim=-1) * d**0.5  # as RMSNorm's
    x.requires_grad_()
    return x, W0, torch.tensor(0.3, dtype=torch.float64, requires_grad=True)


@pytest.mark.parametrize("kind", ["swiglu", "gelu"])
@pytest.mark.parametrize("chunk", [1, 3, 4, 13, 32])
def test_chunk_parallel_level_equals_token_by_token_reference(kind, chunk):
    x, W0, eta = _inputs(kind)
    valid = torch.ones(3, 13, dtype=torch.bool)
    valid[0, :4] = False  # a padded prefix writes nothing and is no target
    probe = torch.linspace(-1.0, 1.0, 6, dtype=torch.float64)
    out = []
    for fn in (read_chunked, read_reference):
        y = fn(kind, W0, x, valid, eta, chunk)
        grads = torch.autograd.grad((y * probe).sum(), [x, *W0, eta], allow_unused=True)
        out.append((y, [torch.zeros_like(eta) if g is None else g for g in grads]))  # eta unused: C >= T
    (y, grads), (y_ref, grads_ref) = out
    torch.testing.assert_close(y, y_ref, atol=TOL64, rtol=0)
    for g, g_ref in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(g, g_ref, atol=TOL64, rtol=0)
    assert float(grads[-1].abs()) > 1e-6 or chunk >= 13  # the step size is learned through the updates


def test_a_chunks_update_reaches_only_later_chunks():
    """Chunk 0 reads the initial weights exactly (a plain MLP, written out here); a token changed in chunk
    1 changes no output before it and changes the outputs of chunk 2 through the weights."""
    x, (Wg, Wi, Wo), eta = _inputs("swiglu")
    x = x.detach()
    y = read_chunked("swiglu", [Wg, Wi, Wo], x, None, eta, 4)
    plain = (F.silu(x @ Wg.T) * (x @ Wi.T)) @ Wo.T
    torch.testing.assert_close(y[:, :4], plain[:, :4], atol=TOL64, rtol=0)
    assert (y[:, 4:] - plain[:, 4:]).abs().max() > 1e-3  # later chunks read updated weights
    x2 = x.clone()
    x2[:, 5] += 1.0
    y2 = read_chunked("swiglu", [Wg, Wi, Wo], x2, None, eta, 4)
    assert torch.equal(y2[:, :5], y[:, :5])
    # chunk 2 (tokens 8..11) sees token 5 only through chunk 1's update: its inputs are unchanged
    assert (y2[:, 8:12] - y[:, 8:12]).abs().max() > 1e-6


def test_hope_model_equals_its_token_by_token_reference(monkeypatch):
    """The whole model (two in-context levels and a static one), loss and every parameter gradient,
    with each level's update swapped for the reference. float32: ~1e2 sums of O(1) terms per value,
    1e-5 is ~80 x eps32 relative to the O(1) loss and the O(0.1) gradients."""
    torch.manual_seed(0)
    cfg = TLMConfig(vocab_size=61, d_model=32, n_layers=2, n_heads=4, d_ff=(32, 32), max_seq_len=24,
                    mixer="hope_attention", cms_chunks=(3, 8, 64))
    model = TaperedLM(cfg)
    x = torch.randint(0, 61, (2, 14), generator=torch.Generator().manual_seed(0))
    grads = same_loss_and_grads(model, x, monkeypatch, cms_update, "read_chunked",
                                (read_chunked, read_reference))
    assert all(grads[f"blocks.{l}.mlp.levels.{i}.lr_logit"].abs() > 0 for l in (0, 1) for i in (0, 1))
