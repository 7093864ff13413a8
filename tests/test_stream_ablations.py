"""Ablations fused with the probe's stream (importance/stream_ablations.py, issue 34): when alignment
statistics stream the kept batches through the native backend, the ablations run right after that forward
from its recorded layer outputs and logits, with no clean forward of their own.

Checked against the importance pass's own path (a probe of the ablations alone: no stream, its own clean
forward), whose ΔNLL tests/test_importance_ablation.py checks against full re-runs: the same values to
float32 rounding (the same kernels on the same rows; 1e-6 leaves room for a reduction order). The pass
count is the closed form of the rules: per kept row the head the stream ran for it (h, the head's share of
a forward), per layer and kind h + (1-h)(L-l)/L, and the self-check's last block (1-h)/L on the first
batch's B0 of R rows. Before this change the fused probe counted a clean forward (1, not h) and a
self-check with the head (h + (1-h)/L), and the count assertion fails.
"""

from __future__ import annotations

import numpy as np
import pytest
from models_zoo import build_model

from tlm_probe.api.library import probe
from tlm_probe.capture import load_probe_model
from tlm_probe.importance.passes import head_share

KINDS = ("mlp_zero", "attn_zero", "block_skip")
ABLATIONS = ",".join(f"ablation_dnll_{k}" for k in KINDS)
SEQ, BATCH = 16, 4


def _rows(res) -> dict:
    df = res.table
    df = df[df.statistic.str.startswith("ablation_")]
    return {(s, int(l)): float(v) for s, l, v in zip(df.statistic, df.layer, df.value, strict=True)}


@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("kept", [8, 6])  # every row of both batches kept; the second batch in part
def test_fused_ablations_equal_the_importance_pass(family, kept, tmp_path):
    folder = build_model(family, tmp_path / family)
    ids = np.random.default_rng(0).integers(0, 200, (8, SEQ)).astype(np.uint32)
    np.save(tmp_path / "ids.npy", ids)
    kw = dict(seq_len=SEQ, batch_size=BATCH, max_tokens=None, full=True, importance={"max_sequences": kept})
    fused = probe(folder, str(tmp_path / "ids.npy"), stats=f"align_mlp_mid,{ABLATIONS}", **kw)
    alone = probe(folder, str(tmp_path / "ids.npy"), stats=ABLATIONS, **kw)
    got, want = _rows(fused), _rows(alone)
    assert set(got) == set(want) and len(want) > 0
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-6, abs=1e-6), k
    imp = fused.provenance["importance"]
    assert imp["ablation_restart"] == "from the cached clean stream"
    pm = load_probe_model(folder)
    L, h = pm.n_layers, head_share(pm)
    per_kind = L * h + (1 - h) * (L + 1) / 2
    expected = h + len(KINDS) * per_kind + BATCH / kept * (1 - h) / L
    assert imp["passes"]["ablation"]["forwards"] == pytest.approx(expected, abs=1e-4)
    unfused = 1 + len(KINDS) * per_kind + BATCH / kept * (1 - h) / L  # its own clean forward
    own = alone.provenance["importance"]["passes"]["ablation"]["forwards"]
    assert own == pytest.approx(unfused, abs=1e-4)
