"""No sublayer may be dead: for every mixer, each block's MLP (Hope-attention: continuum memory) output and
token-mixer output, and the gradients of the MLP's weights, are within 10x of the plain attention model's,
at init and after a few training steps (DESIGN.md section 4).

Why 10x: the mixers change what feeds the MLP but not its width or initialisation, so a live sublayer writes
and learns on the same scale as attention's (measured within ~3x at init here); the old chained CMS, with no
residual or norm between its levels, wrote RMS ~1e-9 against attention's ~1e-3, six orders away. The ratio
is taken per block and per weight matrix: a level whose input weights get ~1e-10 gradients fails even when
another level is alive. The token mixer's output is held to the lower bound only (not dead): Titans' memory
read-out is RMS-normalised before its projection (paper section 4.4), so at init it writes ~10-15x what
attention does, by design; both halves of its MAL pair (memory layer, SWA) must be alive on their own.
"""

from __future__ import annotations

import pytest
import torch

from tlm_probe.models.config import config_with_schedule
from tlm_probe.models.mixer_registry import MIXERS
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.schedules.widths import ScheduleSpec

pytestmark = pytest.mark.usefixtures("one_thread")
SHAPE = dict(vocab_size=61, d_model=32, n_layers=4, n_heads=4, max_seq_len=32, mlp="swiglu")
# Hope: three levels update in context within the 32 tokens, the last is static (chunk >= max_seq_len)
MIXER_KW = {"titans": dict(window=8, mem_chunk=8), "hope_attention": dict(cms_chunks=(4, 8, 16, 64))}
FACTOR = 10.0
STEPS = 5


def _model(mixer: str) -> TaperedLM:
    torch.manual_seed(0)
    kw = {**SHAPE, "mixer": mixer, **MIXER_KW.get(mixer, {})}
    return TaperedLM(config_with_schedule(ScheduleSpec(name="uniform", multiple_of=16), 256, **kw))


def _batch() -> torch.Tensor:
    return torch.randint(0, 61, (4, 32), generator=torch.Generator().manual_seed(1))


def _mlp_grads(model: TaperedLM, l: int) -> dict[str, float]:
    """Gradient norm of each MLP weight matrix of block l, keyed by its kind (W_gate, W_in, W_out) and
    level: attention has one level, Hope's continuum memory several, each compared with attention's."""
    out = {}
    for name, p in model.blocks[l].mlp.named_parameters():
        kind = name.rsplit(".", 2)[-2] if name.endswith(".weight") else name
        if kind.startswith("W_") and p.grad is not None:
            out[name] = (kind, float(p.grad.norm()))
    return out


def _measure(model: TaperedLM, x: torch.Tensor) -> dict:
    model.zero_grad(set_to_none=True)
    loss, cache = model.run_with_cache(x, return_type="loss")
    loss.backward()
    rms = {}

    def r(t):
        return float(t.pow(2).mean().sqrt())

    for l in range(model.cfg.n_layers):
        for hook in ("mlp_out", "attn_out"):
            rms[(l, hook)] = r(cache[f"blocks.{l}.hook_{hook}"])
        if model.cfg.mixer == "titans":  # the MAL pair's two layers: memory, then SWA (attn_out − memory)
            mem = cache[f"blocks.{l}.attn.hook_mem_out"][:, model.cfg.mem_persistent:]
            rms[(l, "memory")] = r(mem)
            rms[(l, "swa")] = r(cache[f"blocks.{l}.hook_attn_out"] - mem)
    grads = {l: _mlp_grads(model, l) for l in range(model.cfg.n_layers)}
    return {"rms": rms, "grads": grads}


def _train(model: TaperedLM, x: torch.Tensor, steps: int) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        model(x, return_type="loss").backward()
        opt.step()


def _within(value: float, ref: float) -> bool:
    return ref / FACTOR <= value <= ref * FACTOR


@pytest.fixture(scope="module")
def attention_reference():
    model, x = _model("attention"), _batch()
    init = _measure(model, x)
    _train(model, x, STEPS)
    return {"init": init, "trained": _measure(model, x)}


@pytest.mark.parametrize("mixer", tuple(MIXERS))
@pytest.mark.parametrize("when", ["init", "trained"])
def test_every_sublayer_writes_and_learns_like_attentions(mixer, when, attention_reference):
    model, x = _model(mixer), _batch()
    if when == "trained":
        _measure(model, x)
        _train(model, x, STEPS)
    got, ref = _measure(model, x), attention_reference[when]
    for (l, hook), value in got["rms"].items():
        expected = ref["rms"][(l, "mlp_out" if hook == "mlp_out" else "attn_out")]
        ok = _within(value, expected) if hook == "mlp_out" else value >= expected / FACTOR
        assert ok, (mixer, when, l, hook, value, expected)
    for l, grads in got["grads"].items():
        ref_by_kind = {kind: norm for kind, norm in ref["grads"][l].values()}
        assert grads, (mixer, l, "no MLP weight has a gradient")
        for name, (kind, norm) in grads.items():
            assert _within(norm, ref_by_kind[kind]), (mixer, when, l, name, norm, ref_by_kind[kind])
