"""Training with every mixer: Hope's multi-frequency updates at exactly the documented steps, exact resume
mid-period, the mixer x schedule comparison grid, and the CLI flags (--mixer, --mixers, --preset)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from cli import app
from tlm_probe.data.stream import TokenData
from tlm_probe.tokenizer import ByteTokenizer
from tlm_probe.train.arms import make_arms, run_name
from tlm_probe.train.compare import compare_arms
from tlm_probe.train.config import TrainConfig
from tlm_probe.train.loop import Trainer
from tlm_probe.train.run import plan_run

runner = CliRunner()


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: tiny forwards lose from threads
BASE = TrainConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64, multiple_of=16, seq_len=16, batch_size=2,
                   steps=9, eval_interval=9, eval_tokens=64, warmup=1, progress=False, data="synthetic",
                   threads=1, mixer="hope_attention", cms_chunks="4,64", cms_step_periods="1,4")


def _data() -> TokenData:
    ids = np.random.default_rng(1).integers(97, 110, size=3000).astype(np.uint32)
    return TokenData(ids[:2500], ids[2500:], ByteTokenizer(), "synthetic", 256)


def _train(tc, out, **kw) -> Trainer:
    trainer = Trainer(plan_run(tc, out, data=_data(), resume=kw.pop("resume", False)), **kw)
    return trainer


def test_slow_levels_step_exactly_every_period(tmp_path):
    """cms_step_periods (1, 4): level 0 steps every step, the last level (mlp.W_*) on steps 4 and 8 only;
    read from the parameters' version counters (bumped by each in-place optimizer update) and values."""
    trainer = _train(BASE, tmp_path / "run")
    params = dict(trainer.raw.named_parameters())
    fast = [n for n in params if ".mlp.levels.0." in n]
    slow = [n for n in params if ".mlp.W_" in n or ".mlp.norm." in n]
    # 2 blocks x (SwiGLU W_gate, W_in, W_out + level 0's step size | the last level's norm)
    assert len(fast) == len(slow) == 2 * 4
    seen = {n: (params[n]._version, params[n].detach().clone()) for n in fast + slow}
    updated: dict[str, list[int]] = {n: [] for n in seen}

    def report(progress):
        for n in seen:
            version, value = params[n]._version, params[n].detach().clone()
            changed = not torch.equal(value, seen[n][1])
            assert changed == (version != seen[n][0]), n  # versions and values tell the same story
            if changed:
                updated[n].append(progress.step)
            seen[n] = (version, value)

    trainer.run(report)
    for n in fast:
        assert updated[n] == list(range(1, 10)), n
    for n in slow:
        assert updated[n] == [4, 8], n


def test_resume_mid_period_is_exact(tmp_path):
    tc = BASE.replace(ckpt_interval=3)
    _train(tc, tmp_path / "straight").run()
    _train(tc, tmp_path / "split", stop_at=6).run()  # step 6: two of the slow level's 4 steps accumulated
    blob = torch.load(next((tmp_path / "split" / "state").glob("step_0000006")) / "trainer.pt",
                      weights_only=True)
    sums = blob["extra"]["multifreq"]
    assert sums and all(s.abs().sum() > 0 for s in sums.values())  # the accumulated gradients are saved
    _train(tc, tmp_path / "split", resume=True).run()
    a = load_file(tmp_path / "straight" / "model.safetensors")
    b = load_file(tmp_path / "split" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_compare_grid_pairs_each_mixer_with_its_own_uniform(tmp_path):
    base = BASE.replace(steps=2, eval_interval=2, mixer="attention")
    arms = make_arms(["attention", "titans"], ["uniform", "cosine:1.5:0.5"])
    doc = compare_arms(base, arms, [0, 1], tmp_path / "cmp", data=_data())
    names = ["uniform", "cosine:1.5:0.5", "titans-uniform", "titans-cosine:1.5:0.5"]
    assert [a.name for a in arms] == names
    res = pd.read_csv(tmp_path / "cmp" / "results.csv")
    assert list(dict.fromkeys(res["arm"])) == names
    assert res.groupby("arm")["mixer"].first().to_dict() == {n: ("titans" if "titans" in n else "attention")
                                                            for n in names}
    for arm, seed in zip(res["arm"], res["seed"], strict=True):  # each row is its run's config
        cfg = json.loads((tmp_path / "cmp" / "runs" / run_name(arm, seed) / "config.json").read_text())
        assert cfg["mixer"] == ("titans" if "titans" in arm else "attention")
    paired = pd.read_csv(tmp_path / "cmp" / "paired.csv").set_index("arm")
    assert paired["baseline"].to_dict() == {"cosine:1.5:0.5": "uniform",
                                            "titans-cosine:1.5:0.5": "titans-uniform"}
    for arm, ref in paired["baseline"].items():
        d = (res[res["arm"] == arm].sort_values("seed")["val_loss"].to_numpy()
             - res[res["arm"] == ref].sort_values("seed")["val_loss"].to_numpy())
        assert paired.loc[arm, "val_loss_diff_mean"] == pytest.approx(d.mean())
    assert doc["baseline"] == {"attention": "uniform", "titans": "titans-uniform"}
    summary = pd.read_csv(tmp_path / "cmp" / "summary.csv").set_index("arm")
    assert summary.loc["titans-uniform", "params"] > summary.loc["uniform", "params"]
    assert summary.loc["titans-uniform", "params"] == summary.loc["titans-cosine:1.5:0.5", "params"]


def test_cli_mixer_flags(tmp_path):
    corpus = tmp_path / "c.txt"
    text = "\n\n".join(f"paragraph {i}: the tapered model reads word {i * 7 % 13}" for i in range(200))
    corpus.write_text(text)
    common = ["--data", str(corpus), "--d-model", "32", "--layers", "2", "--heads", "2", "--d-ff", "64",
              "--multiple-of", "16", "--seq-len", "16", "--batch-size", "2", "--steps", "2",
              "--eval-tokens", "64", "--eval-interval", "2", "--warmup", "1", "--threads", "1"]
    r = runner.invoke(app, ["train", "--out", str(tmp_path / "t"), "--mixer", "titans", "--json", *common])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "t" / "config.json").read_text())["mixer"] == "titans"
    info = runner.invoke(app, ["info", str(tmp_path / "t"), "--json"])
    doc = json.loads(info.stdout)
    assert doc["params"] == doc["uniform_params"] and doc["config"]["mixer"] == "titans"
    r = runner.invoke(app, ["compare", "--out", str(tmp_path / "c"), "--mixers",
                            "gated_attention,hope_attention", "--schedules", "uniform,cosine:1.5:0.5",
                            "--seeds", "0", "--cms-chunks", "4,64", *common])  # 2 levels: d_ff 64 splits
    assert r.exit_code == 0, r.output
    assert set(pd.read_csv(tmp_path / "c" / "results.csv")["mixer"]) == {"gated_attention", "hope_attention"}
    r = runner.invoke(app, ["train", "--out", str(tmp_path / "bad"), "--mixer", "mamba", *common])
    assert r.exit_code == 1 and "unknown mixer 'mamba'" in r.output and not (tmp_path / "bad").exists()


@pytest.mark.parametrize("mixer", ["titans", "hope_attention"])
def test_schedule_command_prints_preset_counts_side_by_side(mixer):
    from tlm_probe.models.accounting import count_params
    from tlm_probe.models.presets import preset_config

    r = runner.invoke(app, ["schedule", "--preset", "tlm-760m", "--mixer", mixer, "--schedule",
                            "cosine:1.5:0.5", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    expected = count_params(preset_config("tlm-760m", mixer=mixer)).total
    assert doc["params"] == doc["uniform_params"] == expected
    assert doc["flops_per_token"] == doc["uniform_flops_per_token"] and doc["parity"]
    assert len(doc["widths"]) == 28 and doc["widths"][0] > doc["widths"][-1]
