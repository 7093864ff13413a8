"""Every mixer setting is reachable from the CLI (generated from TrainConfig fields) and recorded in
config.json; --match-params shrinks a mixer's MLP to attention's count (the largest width that fits);
Titans' clip fraction reaches metrics.jsonl; accounting equals numel on the meta device off the defaults."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from cli import app
from tlm_probe.errors import UserError
from tlm_probe.models.accounting import count_params
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.train.config import TrainConfig

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def common(tmp_path):
    corpus = tmp_path / "c.txt"
    text = "\n\n".join(f"paragraph {i}: the tapered model reads word {i * 7 % 13}" for i in range(200))
    corpus.write_text(text)
    return ["--data", str(corpus), "--d-model", "32", "--layers", "2", "--heads", "2", "--d-ff", "128",
            "--multiple-of", "16", "--seq-len", "16", "--batch-size", "2", "--steps", "2",
            "--eval-tokens", "64", "--eval-interval", "2", "--log-interval", "1", "--warmup", "1",
            "--threads", "1"]


def test_titans_settings_reach_config_json_and_clip_fraction_is_logged(tmp_path, common):
    flags = ["--window", "8", "--mem-chunk", "4", "--conv-kernel", "3", "--mem-expand", "1",
             "--mem-persistent", "2"]
    r = runner.invoke(app, ["train", "--out", str(tmp_path / "t"), "--mixer", "titans", *flags, *common])
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "t" / "config.json").read_text())
    given = dict(window=8, mem_chunk=4, conv_kernel=3, mem_expand=1, mem_persistent=2)
    assert {k: cfg[k] for k in given} == given
    train = [json.loads(line) for line in (tmp_path / "t" / "metrics.jsonl").read_text().splitlines()]
    fracs = [m["mem_clip_frac"] for m in train if m["kind"] == "train"]
    assert len(fracs) == 2 and all(0.0 <= f <= 1.0 for f in fracs)


def test_cms_settings_reach_config_json_and_bad_lists_fail_cleanly(tmp_path, common):
    r = runner.invoke(app, ["train", "--out", str(tmp_path / "h"), "--mixer", "hope_attention",
                            "--cms-chunks", "4,64", "--cms-step-periods", "1,2", *common])
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    assert cfg["cms_chunks"] == [4, 64] and cfg["cms_step_periods"] == [1, 2] and len(cfg["d_ff"]) == 2
    for bad, words in (("4,x", "comma-separated integers"), ("0,64", "cms_chunks")):
        r = runner.invoke(app, ["train", "--out", str(tmp_path / "bad"), "--mixer", "hope_attention",
                                "--cms-chunks", bad, *common])
        assert r.exit_code == 1 and words in r.output and "Traceback" not in r.output, r.output
        assert not (tmp_path / "bad").exists()


def test_demo_and_compare_offer_the_mixer_settings():
    for cmd in ("demo", "compare", "sweep"):
        r = runner.invoke(app, [cmd, "--help"], env={"COLUMNS": "200"})
        for flag in ("--window", "--mem-persistent", "--cms-chunks", "--match-params"):
            assert flag in r.output, (cmd, flag)


@pytest.mark.parametrize("mixer", ["titans", "gated_attention", "hope_attention"])
def test_match_params_picks_the_mlp_budget_closest_to_attentions_count(mixer):
    tc = TrainConfig(d_model=64, n_layers=8, n_heads=4, d_ff=256, multiple_of=32, seq_len=128, steps=1,
                     mixer=mixer, schedule="cosine:1.5:0.5")
    attention = count_params(tc.replace(mixer="attention").model_config(256)).total
    matched = tc.replace(match_params=True).model_config(256)
    gap = abs(count_params(matched).total - attention)
    step = 32 * matched.mlp_levels
    budget = round(matched.mean_d_ff * matched.mlp_levels)
    for other in (budget - step, budget + step):  # the neighbouring budgets are no closer
        try:
            neighbour = tc.replace(d_ff=other).model_config(256) if step <= other <= 256 else None
        except UserError:  # Hope at d_ff 128: 32-wide levels cannot take the taper, no candidate
            neighbour = None
        if neighbour is not None:
            assert abs(count_params(neighbour).total - attention) >= gap
    assert gap < 3 * 64 * 8 * 32  # closer than one width step of parameters (3·d·L per unit of d_ff)
    assert sum(matched.d_ff) == len(matched.d_ff) * matched.mean_d_ff  # the schedule still keeps the mean


@pytest.mark.parametrize("kw", [
    dict(mixer="titans", mem_persistent=3, mem_expand=3, conv_kernel=2, norm="layernorm"),
    dict(mixer="titans", mlp="gelu", n_kv_heads=2),
    dict(mixer="hope_attention", cms_chunks=(4, 16, 40, 1000), norm="layernorm"),
    dict(mixer="hope_attention", cms_chunks=(2,), mlp="gelu"),
])
def test_accounting_equals_numel_on_meta_off_the_defaults(kw):
    cfg = TLMConfig(vocab_size=61, d_model=32, n_layers=3, n_heads=4, d_ff=(64, 48, 32), max_seq_len=40, **kw)
    with torch.device("meta"):
        model = TaperedLM(cfg)
    assert sum(p.numel() for p in model.parameters()) == count_params(cfg).total
