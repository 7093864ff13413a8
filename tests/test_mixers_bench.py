"""benchmarks/titans_parts.py times what the Titans model computes: the memory inputs it captures are the
ones the model's forward used (the memory run on them gives the model's own read-out), and the model is
left unpatched afterwards (a benchmark that left its capture in place would time, and train, a wrapper)."""

from __future__ import annotations

import pytest
import torch

import tlm_probe.models.titans as titans_module
from benchmarks import titans_parts
from tlm_probe.models.config import config_with_schedule
from tlm_probe.models.memory import memory_chunked
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.schedules.widths import ScheduleSpec

pytestmark = pytest.mark.usefixtures("one_thread")


def _titans():
    torch.manual_seed(0)
    cfg = config_with_schedule(ScheduleSpec(name="uniform", multiple_of=16), 64, vocab_size=61, d_model=32,
                               n_layers=2, n_heads=2, max_seq_len=16, mixer="titans", window=4, mem_chunk=4)
    return TaperedLM(cfg).train(), torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(1))


def test_captured_memory_inputs_reproduce_the_models_read_out():
    model, x = _titans()
    _, cache = model.run_with_cache(x)
    with titans_parts._captured(model) as seen:
        model(x)
    args, kw = seen["loop"]
    y = memory_chunked(*args, **{k: v for k, v in kw.items() if k != "stats"})  # (B·H, T, d_h)
    read = cache["blocks.0.attn.hook_mem_read"]  # (B, T, H, d_h)
    # the same ops on the same inputs in one process: equal up to float32 rounding (values are O(1))
    torch.testing.assert_close(y.view(2, 2, 16, 16).transpose(1, 2), read, atol=1e-6, rtol=0)
    assert seen["swa"][0].shape == (2, 16, 32) and seen["mlp"][0].shape == (2, 16, 32)


def test_bench_titans_reports_every_part_and_leaves_the_model_unpatched():
    model, x = _titans()
    out = titans_parts.bench_titans(model, x, rounds=1, memory_rounds=1)
    assert titans_module.memory_chunked is memory_chunked
    assert "memory_layer" not in vars(model.blocks[0].attn)  # the class's method again
    parts = {"memory update", "memory projections", "attention (SWA)", "MLP", "other"}
    assert set(out["breakdown_s"]) == parts
    assert out["memory"]["speedup"]["median"] > 0 and out["memory"]["memories"] == 4
