"""`tlm probe RUN --checkpoints`: a run's kept checkpoints in one tidy table; trajectory/advantage figures."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from tiny_flags import TINY
from typer.testing import CliRunner

from cli import app
from tlm_probe.plotting.trajectory import plot_trajectory
from tlm_probe.results import read_results

runner = CliRunner()
FLAGS = list(TINY)
FLAGS[FLAGS.index("--steps") + 1] = "3"
FLAGS[FLAGS.index("--eval-interval") + 1] = "1"
CKPT = ["--ckpt-interval", "1", "--keep-last", "5"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("traj")
    text = "\n\n".join(f"paragraph {i}: the tapered model reads word {i * 7 % 13} twice" for i in range(200))
    (root / "c.txt").write_text(text)
    r = runner.invoke(app, ["train", "--out", str(root / "run"), "--data", str(root / "c.txt"),
                            "--schedule", "cosine:1.5:0.5", *FLAGS, *CKPT])
    assert r.exit_code == 0, r.output
    return root


def _probe(args):
    return runner.invoke(app, ["probe", *args, "--max-tokens", "200", "--seq-len", "16"])


def test_all_checkpoints_in_one_table_equal_single_probes(run, tmp_path):
    r = _probe([str(run / "run"), "--data", str(run / "c.txt"), "--checkpoints", "all", "--out",
                str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    table, _, prov = read_results(tmp_path / "p")
    assert sorted(table["step"].unique()) == [1, 2, 3]
    assert set(table["model"]) == {"run"} and [c["step"] for c in prov["checkpoints"]] == [1, 2, 3]
    assert (table.groupby("step")["tokens"].first().diff().dropna() > 0).all()
    # independent path: a plain checkpoint folder made by hand from step 2's weights, probed as usual
    ck = tmp_path / "ck2"
    ck.mkdir()
    for f in (run / "run").iterdir():
        if f.is_file() and f.suffix != ".safetensors":
            shutil.copy(f, ck / f.name)
    shutil.copy(run / "run" / "state" / "step_0000002" / "model.safetensors", ck / "model.safetensors")
    r = _probe([str(ck), "--data", str(run / "c.txt"), "--out", str(tmp_path / "single")])
    assert r.exit_code == 0, r.output
    single, _, _ = read_results(tmp_path / "single")
    two = table[table["step"] == 2].merge(single, on=["layer", "statistic"], suffixes=("", "_ref"))
    assert len(two) == len(single) > 0
    # same weights, data and code: float64 accumulators of float32 values; 1e-9 relative is far above
    # any summation-order effect in one process and far below a different checkpoint's change
    np.testing.assert_allclose(two["value"], two["value_ref"], rtol=1e-9, atol=1e-12)
    steps_differ = table.pivot_table(index=["layer", "statistic"], columns="step", values="value")
    assert (steps_differ[1] != steps_differ[3]).any()  # training moved the statistics


def test_chosen_steps_and_bad_requests(run, tmp_path):
    r = _probe([str(run / "run"), "--data", str(run / "c.txt"), "--checkpoints", "3,1", "--out",
                str(tmp_path / "p"), "--json"])
    assert r.exit_code == 0, r.output
    assert sorted(read_results(tmp_path / "p")[0]["step"].unique()) == [1, 3]
    for spec, match in (("7", "kept: 1, 2, 3"), ("x", "'all' or comma-separated")):
        r = _probe([str(run / "run"), "--data", str(run / "c.txt"), "--checkpoints", spec, "--out",
                    str(tmp_path / "bad")])
        assert r.exit_code == 1 and r.stderr.startswith("error: ") and match in r.stderr, r.output
        assert not (tmp_path / "bad" / "results.csv").exists()
    r = _probe([str(run / "c.txt"), "--checkpoints", "all", "--out", str(tmp_path / "bad2")])
    assert r.exit_code == 1 and "training run folder" in r.stderr, r.output


def _table(steps=(0, 10, 20), layers=4) -> pd.DataFrame:
    rows = [dict(model="m", layer=l, depth=l / (layers - 1), statistic="s", value=step + l, ci_low=np.nan,
                 ci_high=np.nan, n_tokens=5, d_ff=64, step=step) for step in steps for l in range(layers)]
    return pd.DataFrame(rows)


def test_plot_trajectory_draws_a_line_per_step_from_a_dataframe():
    fig = plot_trajectory(_table(), "s")
    ax = fig.axes[0]
    assert len(ax.get_lines()) == 3
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [[0, 1, 2, 3], [10, 11, 12, 13],
                                                                    [20, 21, 22, 23]]
    assert fig.axes[1].get_ylabel() == "training step"  # the colour bar


def test_several_runs_get_a_panel_each_on_one_step_scale():
    """Uniform vs the best arm side by side (before, a second run was refused, so the allocation study's
    uniform-vs-best figure failed). Each panel holds only its own run's lines; the y axis is shared."""
    late = _table().assign(model="other", value=lambda d: d["value"] + 100)
    fig = plot_trajectory(pd.concat([_table(), late]), "s")
    panels = [ax for ax in fig.axes if ax.get_lines()]
    assert [ax.get_title() for ax in panels] == [_table()["model"].iloc[0], "other"]
    assert [max(max(line.get_ydata()) for line in ax.get_lines()) for ax in panels] == [23, 123]
    assert panels[0].get_ylim() == panels[1].get_ylim()
    assert sum(ax.get_ylabel() == "training step" for ax in fig.axes) == 1  # one shared colour bar


def test_trajectory_plotting_does_not_import_torch():
    code = "import sys, tlm_probe.plotting.trajectory; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cli_trajectory_figure_and_hint(run, tmp_path):
    r = _probe([str(run / "run"), "--data", str(run / "c.txt"), "--checkpoints", "all", "--out",
                str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["plot", str(tmp_path / "p"), "--kind", "trajectory", "--statistic",
                            "block_influence", "--out", str(tmp_path / "t.png"), "--json"])
    assert r.exit_code == 0, r.output
    assert "3 checkpoints" in json.loads(r.stdout)["title"] and (tmp_path / "t.png").stat().st_size > 0
    r = _probe([str(run / "run"), "--data", str(run / "c.txt"), "--out", str(tmp_path / "plain")])
    r = runner.invoke(app, ["plot", str(tmp_path / "plain"), "--kind", "trajectory", "--out",
                            str(tmp_path / "u.png")])
    assert r.exit_code == 1 and "--checkpoints" in r.stderr
    shutil.copytree(tmp_path / "p", tmp_path / "q")  # a second run: the same table under another name
    for name in ("results.csv", "results.parquet"):
        if (tmp_path / "q" / name).is_file():
            table = read_results(tmp_path / "q" / name)[0].assign(model="other")
            (table.to_csv if name.endswith("csv") else table.to_parquet)(tmp_path / "q" / name, index=False)
    r = runner.invoke(app, ["plot", str(tmp_path / "p"), str(tmp_path / "q"), "--kind", "trajectory",
                            "--statistic", "block_influence", "--out", str(tmp_path / "two.png"), "--json"])
    assert r.exit_code == 0, r.output
    assert "3 checkpoints" in json.loads(r.stdout)["title"]  # the figure's title, not a panel's run name


def test_advantage_over_training_is_the_seed_paired_difference(run, tmp_path):
    from tlm_probe.plotting.inputs import advantage_curves

    out = tmp_path / "cmp"
    r = runner.invoke(app, ["compare", "--out", str(out), "--data", str(run / "c.txt"), "--schedules",
                            "uniform,cosine:1.5:0.5", "--seeds", "0,1", *FLAGS])
    assert r.exit_code == 0, r.output
    curves = advantage_curves(out)
    assert set(curves["arm"]) == {"cosine:1.5:0.5"} and set(curves["metric"]) == {"val_loss − uniform"}

    def val(arm, seed):  # independent: read metrics.jsonl directly
        text = (out / "runs" / f"{arm}-s{seed}" / "metrics.jsonl").read_text()
        lines = [json.loads(x) for x in text.splitlines() if x.strip()]
        return {d["step"]: d["val_loss"] for d in lines if d.get("val_loss") is not None}

    diffs = {s: [val("cosine:1.5:0.5", seed)[s] - val("uniform", seed)[s] for seed in (0, 1)]
             for s in val("uniform", 0)}
    for _, row in curves.iterrows():
        assert row["mean"] == pytest.approx(np.mean(diffs[row["step"]]), abs=1e-12)
        assert row["std"] == pytest.approx(np.std(diffs[row["step"]], ddof=1), abs=1e-12)
    r = runner.invoke(app, ["plot", str(out), "--kind", "advantage", "--out", str(tmp_path / "a.png")])
    assert r.exit_code == 0, r.output
