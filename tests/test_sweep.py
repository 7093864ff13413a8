"""tlm sweep: the grid of arms, its tables checked against results.csv, the heatmap, bad input."""

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from cli import app
from tlm_probe.errors import UserError
from tlm_probe.plotting.sweep import plot_sweep, significance
from tlm_probe.stats.sweep import sweep_table
from tlm_probe.train.sweep import grid_arms, parse_ratios

runner = CliRunner()
TINY = ["--steps", "2", "--threads", "1", "--multiple-of", "16", "--seq-len", "16", "--d-model", "32",
        "--layers", "3", "--heads", "2", "--d-ff", "64", "--eval-tokens", "64", "--batch-size", "2",
        "--eval-interval", "2", "--warmup", "1"]


def test_grid_arms_and_ratios():
    ratios = parse_ratios("1.25:0.75, 1.5:0.5")
    assert ratios == [(1.25, 0.75), (1.5, 0.5)]
    assert grid_arms(["cosine", "linear"], ratios, ["wider-early", "uniform"]) == [
        "uniform", "cosine:1.25:0.75", "cosine:1.5:0.5", "linear:1.25:0.75", "linear:1.5:0.5", "wider-early"]
    for bad in ("1.5", "a:b", "1.5:-0.5", "1.5:0.5,1.5:0.5", "inf:1"):
        with pytest.raises(UserError):
            parse_ratios(bad)
    with pytest.raises(UserError, match="unknown sweep shape"):
        grid_arms(["wider-early"], ratios)


def test_sweep_table_and_heatmap():
    paired = pd.DataFrame({
        "arm": ["cosine:1.5:0.5", "cosine:1.25:0.75", "linear:1.5:0.5", "wider-early"],
        "n_pairs": 3, "val_loss_diff_mean": [-0.02, -0.01, 0.005, 0.03],
        "val_loss_p": [0.004, 0.2, 0.7, 0.03],
        "val_loss_diff_ci_low": -0.1, "val_loss_diff_ci_high": 0.1, "val_loss_dz": 1.0})
    table = sweep_table(paired)
    assert list(table["shape"]) == ["cosine", "cosine", "linear", "wider-early"]
    assert list(table["ratio"]) == ["1.5→0.5", "1.25→0.75", "1.5→0.5", ""]
    assert table["delta"].tolist() == paired["val_loss_diff_mean"].tolist()
    fig = plot_sweep(table)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "-0.0200\np=0.004**" in texts and "+0.0050\np=0.7" in texts
    assert len(texts) == 3  # the off-grid arm (wider-early) is in the table, not in the heatmap
    assert significance(float("nan")) == "p n/a"
    with pytest.raises(UserError, match="needs two or more shape x ratio arms; cosine:1.5:0.5 against"):
        plot_sweep(table.iloc[[0, 3]])  # a two-arm demo: one grid cell (and an off-grid arm)


def test_sweep_cli_end_to_end(tmp_path):
    out = tmp_path / "sweep"
    args = ["sweep", "--shapes", "cosine", "--ratios", "1.25:0.75,1.5:0.5", "--seeds", "0,1",
            "--data", "builtin:pydoc", "--out", str(out), "--json", *TINY]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    res = pd.read_csv(out / "results.csv")
    assert list(dict.fromkeys(res["arm"])) == ["uniform", "cosine:1.25:0.75", "cosine:1.5:0.5"]
    sweep = pd.read_csv(out / "sweep.csv").set_index("arm")
    for arm in ("cosine:1.25:0.75", "cosine:1.5:0.5"):  # the paired mean, recomputed from results.csv
        a = res[res.arm == arm].sort_values("seed")["val_loss"].to_numpy()
        b = res[res.arm == "uniform"].sort_values("seed")["val_loss"].to_numpy()
        assert sweep.loc[arm, "delta"] == pytest.approx(np.mean(a - b), abs=1e-12)
    assert (out / "sweep_heatmap.png").stat().st_size > 1000
    assert json.loads(r.stdout)["sweep_heatmap"].endswith("sweep_heatmap.png")
    # a sweep folder is a comparison: compare with the same arms finds every run finished
    again = runner.invoke(app, ["compare", "--schedules", ",".join(dict.fromkeys(res["arm"])), "--seeds",
                                "0,1", "--data", "builtin:pydoc", "--out", str(out), "--json", *TINY])
    assert again.exit_code == 0, again.output
    assert pd.read_csv(out / "results.csv").equals(res)


def test_sweep_over_two_mixers_draws_a_panel_each(tmp_path):
    out = tmp_path / "sweep"
    r = runner.invoke(app, ["sweep", "--shapes", "cosine", "--ratios", "1.5:0.5", "--mixers",
                            "attention,gated_attention", "--seeds", "0,1", "--data", "builtin:pydoc",
                            "--out", str(out), *TINY])
    assert r.exit_code == 0, r.output
    sweep = pd.read_csv(out / "sweep.csv")
    assert sorted(zip(sweep.mixer, sweep["shape"], sweep.ratio, strict=True)) == [
        ("attention", "cosine", "1.5→0.5"), ("gated_attention", "cosine", "1.5→0.5")]
    res = pd.read_csv(out / "results.csv")
    arm, base = "gated_attention-cosine:1.5:0.5", "gated_attention-uniform"  # paired within its own mixer
    d = (res[res.arm == arm].sort_values("seed").val_loss.to_numpy()
         - res[res.arm == base].sort_values("seed").val_loss.to_numpy())
    assert sweep.set_index("arm").loc[arm, "delta"] == pytest.approx(d.mean(), abs=1e-12)


def test_sweep_bad_ratio_is_one_line(tmp_path):
    r = runner.invoke(app, ["sweep", "--shapes", "cosine", "--ratios", "1.5", "--out", str(tmp_path / "x"),
                            *TINY])
    assert r.exit_code == 1 and "START:END" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "x").exists()


def test_a_sweep_of_one_heatmap_cell_is_refused_before_training(tmp_path):
    """It trained every run and then failed drawing the heatmap."""
    out = tmp_path / "x"
    r = runner.invoke(app, ["sweep", "--shapes", "cosine", "--ratios", "1.5:0.5", "--out", str(out), *TINY])
    assert r.exit_code == 1 and r.output.count("error:") == 1 and "Traceback" not in r.output
    assert "tlm compare --schedules uniform,cosine:1.5:0.5" in r.output and not out.exists()


def test_overwrite_never_replaces_a_users_file_named_like_a_sweep_file(tmp_path):
    """--overwrite writes beside a user's files, never onto one: sweep.csv was replaced after training."""
    for name in ("sweep.csv", "sweep_heatmap.png", "paired.png"):
        out = tmp_path / name.replace(".", "_")
        out.mkdir()
        (out / name).write_text("mine\n")
        r = runner.invoke(app, ["sweep", "--shapes", "cosine", "--ratios", "1.25:0.75,1.5:0.5", "--out",
                                str(out), "--overwrite", *TINY])
        assert r.exit_code == 1 and r.output.count("error:") == 1 and name in r.output, r.output
        assert (out / name).read_text() == "mine\n" and sorted(p.name for p in out.iterdir()) == [name]
