"""tlm demo --quick: the whole main job (train both arms, compare, probe, figure) in seconds."""

import json

import pandas as pd
from typer.testing import CliRunner

from cli import app


def test_quick_demo_writes_comparison_probe_and_figure(tmp_path):
    out = tmp_path / "demo"
    args = ["demo", "--out", str(out), "--quick", "--steps", "2", "--threads", "1", "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    res = pd.read_csv(out / "results.csv")
    assert list(res["arm"]) == ["uniform", "cosine:1.5:0.5"] and res["params"].nunique() == 1
    assert res["d_ff"].tolist() == ["256 256 256 256", "384 320 192 128"]
    for name in ("uniform-s0", "cosine:1.5:0.5-s0"):
        probe = pd.read_csv(out / "probe" / name / "results.csv")
        align = probe[probe["statistic"] == "align_mlp_mid"].sort_values("layer")
        assert align["layer"].tolist() == [0, 1, 2, 3] and align["value"].between(-1, 1).all()
        prov = json.loads((out / "probe" / name / "provenance.json").read_text())
        assert prov["options"]["split"] == prov["data"]["split"] == "val"  # provenance agrees with itself
    cos_widths = (
        pd.read_csv(out / "probe" / "cosine:1.5:0.5-s0" / "results.csv").groupby("layer")["d_ff"].first()
    )
    assert cos_widths.tolist() == [384, 320, 192, 128]
    png = out / "alignment_vs_depth.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and doc["figures_alignment"] == str(png)
