"""Each peer arm of the probe benchmark runs on its own freshly loaded model (issue 24): the
TransformerLens bridge rewrites the model it wraps in place, so a baseline sharing that object measured TL
against TL and read ~1.0x."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from models_zoo import build_model  # noqa: E402

from benchmarks import bench_probe  # noqa: E402


def _modules(*roots) -> set[int]:
    return {id(m) for r in roots for m in r.modules()}


def _storages(*roots) -> set[int]:
    return {t.untyped_storage().data_ptr() for r in roots for t in [*r.parameters(), *r.buffers()]}


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_peer_arms_share_no_module_or_weight(tmp_path, family):
    m = bench_probe.peer_models(build_model(family, tmp_path / family))
    groups = {
        "tlm": (m["tlm"].model,),
        "tl": (m["tl"].model, m["bridge"]),
        "nnsight": (m["nnsight"].model,),
    }
    names = list(groups)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not _modules(*groups[a]) & _modules(*groups[b]), (a, b)
            assert not _storages(*groups[a]) & _storages(*groups[b]), (a, b)
    # the bridge does wrap its own copy (else the check above would be vacuous for it)
    assert _modules(m["tl"].model) & _modules(m["bridge"])
