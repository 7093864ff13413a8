"""benchmarks/bench_fixed.py still runs against today's API: each arm once on a tiny model (the figures
are printed by `python -m benchmarks.bench_fixed`, never asserted)."""

from models_zoo import build_model

from benchmarks import bench_fixed
from benchmarks.timing import line


def test_per_call_and_phases_run(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_fixed, "SEQ", 16)
    folder = build_model("llama", tmp_path / "llama")
    res = bench_fixed.per_call(folder, tmp_path, (1, 2), rounds=1)
    res.update(bench_fixed.phases(folder, tmp_path, rounds=1, vocab=320))  # the zoo's vocabulary
    assert len(res) == 2 + 5
    for name, r in res.items():
        assert r["median"] > 0 and line(name, r)
