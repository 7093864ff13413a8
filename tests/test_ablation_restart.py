"""Ablations restarted from the cached clean stream (importance/restart.py) against the full re-run.

The full re-run is the path every ablation took before: the whole model on the repeated batch. Both paths
evaluate the same function; they differ only in rounding, because the full re-run recomputes layers < l0
on G x B rows while the restart reuses the clean pass's B-row result. So the bound is rounding:
- float64: eps 2.2e-16 x |NLL| (~log V = 4) x a factor 1e5 for depth and the matmul sums -> 1e-9;
- float32: eps 1.2e-7 x 4 x a factor 200 (the same depth/sum factor, tiny models) -> 1e-4.
A wrong stream (e.g. one layer off) moves ΔNLL by O(0.01..1) on these models, far above both bounds.
"""

import pytest
import torch
from models_zoo import build_model
from test_importance_suite import batches

from tlm_probe.capture import load_probe_model, wrap_model
from tlm_probe.importance import suite
from tlm_probe.importance.options import DEFAULT_ABLATIONS, ImportanceOptions
from tlm_probe.importance.passes import head_share
from tlm_probe.importance.restart import Restart
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.tlm import Block, TaperedLM

OPTS = ImportanceOptions(pool_size=64, ablation_rows=6)  # 2 ablations per forward at B = 3: mixed groups
RESTARTED = "from the cached clean stream"


class FullRerun(Restart):
    """The old path: never restart."""

    def __init__(self, layers, head):
        super().__init__(layers, head)
        self.reason = "full re-run (test)"


def effects(pm, monkeypatch, full: bool):
    metric = "dnll" if pm.is_causal else "shift"
    stats = [f"ablation_{metric}_{a}" for a in DEFAULT_ABLATIONS]
    with monkeypatch.context() as m:
        if full:
            m.setattr(suite, "Restart", FullRerun)
        rows, _, info = suite.run_importance(pm, batches(pm.vocab_size), stats, OPTS)
    values = {(r["statistic"], r["layer"]): r["value"] for r in rows}
    return values, info


def tiny_tlm(mixer="attention", dtype=torch.float64) -> TaperedLM:
    torch.manual_seed(0)
    cfg = TLMConfig(
        vocab_size=61, d_model=32, n_layers=4, n_heads=4, d_ff=(96, 64, 48, 32), max_seq_len=16, mixer=mixer
    )
    return TaperedLM(cfg).eval().to(dtype)


def hf(family, tmp_path, dtype="float64"):
    return load_probe_model(build_model(family, tmp_path / family, tokenizer=False), dtype=dtype)


def assert_same(pm, monkeypatch, bound):
    got, info = effects(pm, monkeypatch, full=False)
    want, info_full = effects(pm, monkeypatch, full=True)
    assert info["ablation_restart"] == RESTARTED and info_full["ablation_restart"] == "full re-run (test)"
    assert got.keys() == want.keys() and len(got) == len(DEFAULT_ABLATIONS) * pm.n_layers
    worst = max(abs(got[k] - want[k]) for k in got)
    assert worst <= bound, (pm.family, worst)
    assert max(abs(v) for v in want.values()) > 10 * bound  # the effects are not all ~0 (~4e-3 here)
    return info, info_full


TLM_MIXERS = ("attention", "gated_attention", "titans", "hope_attention")


@pytest.mark.parametrize(
    "family", [*(f"tlm:{m}" for m in TLM_MIXERS), "gpt2", "llama", "gpt_neox", "opt", "bert"]
)
def test_restart_equals_full_rerun_float64(tmp_path, monkeypatch, family):
    tlm, _, mixer = family.partition(":")
    pm = wrap_model(tiny_tlm(mixer), name=family) if tlm == "tlm" else hf(family, tmp_path)
    assert_same(pm, monkeypatch, 1e-9)


def test_restart_equals_full_rerun_float32_and_counts_passes(tmp_path, monkeypatch):
    pm = hf("llama", tmp_path, dtype="float32")
    info, info_full = assert_same(pm, monkeypatch, 1e-4)
    L, h = pm.n_layers, head_share(pm)
    share = [h + (1 - h) * (L - l) / L for l in range(L)]
    # 1 clean, the self-check (the last block alone, no head, on the first batch only: 1/2 of the data
    # here), then every ablation of layer l from layer l on (groups never span layers)
    want = 1 + (1 - h) / L / 2 + sum(len(DEFAULT_ABLATIONS) * share[l] for l in range(L))
    assert info["passes"]["ablation"]["forwards"] == pytest.approx(want, abs=1e-4)
    # per ablation: the head + (L+1)/2 of L blocks on average
    per_ablation = (want - 1 - (1 - h) / L / 2) / (L * len(DEFAULT_ABLATIONS))
    assert per_ablation == pytest.approx(h + (1 - h) * (L + 1) / (2 * L))
    full = 1 + L * len(DEFAULT_ABLATIONS)  # the old count: one forward per ablation
    assert info_full["passes"]["ablation"]["forwards"] == pytest.approx(full, abs=1e-4)


class Rescaled(TaperedLM):
    """Halves the stream between blocks: layer l+1 is not called with layer l's output."""

    def forward(self, input_ids, attention_mask=None, **kw):
        x = self.embed(input_ids)
        positions = torch.arange(input_ids.shape[1]).expand_as(input_ids)
        for block in self.blocks:
            x = 0.5 * block(x, positions, None, None, None)
        return self.unembed(self.ln_final(x))


STORE: dict = {}


class SharedState(Block):
    """Block 0 leaves its output for the later blocks outside the stream (a shared value residual)."""

    def forward(self, x, *rest):
        out = super().forward(x, *rest)
        if self.layer == 0:
            STORE["first"] = out
        return out + 0.1 * STORE["first"]


@pytest.mark.parametrize("case", ["rescaled", "shared_state"])
def test_unsafe_models_fall_back_to_the_full_rerun(monkeypatch, case):
    torch.manual_seed(0)
    cfg = TLMConfig(vocab_size=61, d_model=32, n_layers=3, n_heads=4, d_ff=(64, 48, 32), max_seq_len=16)
    model = (Rescaled if case == "rescaled" else TaperedLM)(cfg).eval().double()
    if case == "shared_state":
        for block in model.blocks:
            block.__class__ = SharedState
    pm = wrap_model(model, name=case)
    got, info = effects(pm, monkeypatch, full=False)
    want, _ = effects(pm, monkeypatch, full=True)
    why = {
        "rescaled": "layer 1 is not called with layer 0's output",  # caught in the clean forward
        "shared_state": "restarted forward failed",  # block 0's state has B rows, the group's stream 2B
    }
    assert why[case] in info["ablation_restart"], info["ablation_restart"]
    assert got == want  # the very same computation
