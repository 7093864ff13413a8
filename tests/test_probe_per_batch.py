"""The probe's per-batch hot path (issue 24): hooks registered once per stream and removed after it, error
or not; the first batch's additivity check reads the same rows by flat index as by its boolean mask; the
per-batch benchmark (benchmarks/per_batch.py) runs against today's API (its figures are printed by
`python -m benchmarks.bench_fixed`, never asserted)."""

from __future__ import annotations

import pytest
import torch
from models_zoo import build_model

from benchmarks.per_batch import per_batch
from benchmarks.timing import line
from tlm_probe.api.library import probe
from tlm_probe.capture import load_probe_model
from tlm_probe.capture.guardrails import picker, sample_counted
from tlm_probe.data import sequences as sq


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return build_model("llama", tmp_path_factory.mktemp("m") / "llama")


def hooks(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_hooks_registered_once_and_removed(llama, monkeypatch):
    pm = load_probe_model(llama)
    before = hooks(pm.model)
    seen = []
    real = sq.batches

    def batches(*args, **kwargs):  # the hooks present while each batch is handed out
        for b in real(*args, **kwargs):
            seen.append(hooks(pm.model))
            yield b

    monkeypatch.setattr(sq, "batches", batches)
    probe(pm, "builtin:pydoc", max_tokens=600, seq_len=32, batch_size=4)
    # hooked before the first batch, the same hooks for every batch (before: hooked inside each forward)
    assert len(seen) >= 3 and len(set(seen)) == 1 and seen[0] > before
    assert hooks(pm.model) == before  # and none left after the stream

    def failing(*args, **kwargs):  # an error in the middle of the stream
        for i, b in enumerate(real(*args, **kwargs)):
            if i == 2:
                raise RuntimeError("stop")
            yield b

    monkeypatch.setattr(sq, "batches", failing)
    with pytest.raises(RuntimeError, match="stop"):
        probe(pm, "builtin:pydoc", max_tokens=600, seq_len=32, batch_size=4)
    assert hooks(pm.model) == before


def test_picker_equals_boolean_mask():
    g = torch.Generator().manual_seed(0)
    counted = torch.rand(5, 300, generator=g) > 0.3
    counted[2] = False  # a row with nothing counted
    x = torch.randn(5, 300, 7, generator=g)
    for mask in (counted, sample_counted(counted, k=40)):
        assert torch.equal(picker(mask)(x), x[mask])  # the same rows, in the same order
    with pytest.raises(IndexError):  # a piece of another shape fails as the mask would
        picker(counted)(torch.randn(300, 5, 7))


def test_per_batch_benchmark_runs(llama, tmp_path):
    res = per_batch("llama", llama, tmp_path, n=4, batch=2, seq=16, rounds=1)
    assert len(res) == 2 * 5  # wall and CPU time
    for name, r in res.items():
        assert r["median"] > 0 and line(name, r)
