"""`tlm compare` and `tlm demo` draw paired.png (each arm minus its baseline, seed by seed) once an arm has
two seed pairs: the dots are results.csv's differences by hand, one seed draws nothing, and --overwrite
removes the figure tlm drew but nothing else."""

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from cli import app
from tlm_probe.files.fileio import read_manifest

runner = CliRunner()
TINY = ["--steps", "2", "--threads", "1", "--multiple-of", "16", "--seq-len", "16", "--d-model", "32",
        "--layers", "3", "--heads", "2", "--d-ff", "64", "--eval-tokens", "64", "--batch-size", "2",
        "--eval-interval", "2", "--warmup", "1", "--data", "builtin:pydoc"]
ARMS = "uniform,cosine:1.5:0.5,linear:1.5:0.5"
PNG = b"\x89PNG\r\n\x1a\n"


def _compare(out, seeds: str, *extra: str):
    return runner.invoke(app, ["compare", "--schedules", ARMS, "--seeds", seeds, "--out", str(out), "--json",
                               *TINY, *extra])


@pytest.fixture(scope="module")
def drawn(tmp_path_factory, request):
    """A two-seed comparison, with the arguments plot_paired was called with recorded."""
    import tlm_probe.plotting.paired as paired_module

    calls = []
    real = paired_module.plot_paired
    patch = pytest.MonkeyPatch()
    patch.setattr(paired_module, "plot_paired", lambda *a, **k: calls.append((a, k)) or real(*a, **k))
    request.addfinalizer(patch.undo)
    out = tmp_path_factory.mktemp("cmp") / "cmp"
    r = _compare(out, "0,1")
    assert r.exit_code == 0, r.output
    return out, json.loads(r.stdout), calls


def test_two_seeds_draw_the_dots_results_csv_gives(drawn):
    out, doc, calls = drawn
    png = out / "paired.png"
    assert png.read_bytes()[:8] == PNG and doc["paired_figure"] == str(png)
    assert "paired.png" in read_manifest(out)
    (diffs, summary, metric), _ = calls[0]
    assert metric == "val_loss" and len(calls) == 1
    res = pd.read_csv(out / "results.csv")
    loss = {(a, s): v for a, s, v in zip(res["arm"], res["seed"], res["val_loss"], strict=True)}
    for arm in ("cosine:1.5:0.5", "linear:1.5:0.5"):
        mine = diffs[diffs["arm"] == arm]
        assert mine["seed"].tolist() == [0, 1] and (mine["baseline"] == "uniform").all()
        hand = [loss[(arm, s)] - loss[("uniform", s)] for s in (0, 1)]
        np.testing.assert_allclose(mine["diff"], hand, rtol=0, atol=1e-12)
    paired = pd.read_csv(out / "paired.csv")
    assert summary["arm"].tolist() == paired["arm"].tolist() == ["cosine:1.5:0.5", "linear:1.5:0.5"]
    np.testing.assert_allclose(summary["delta"], paired["val_loss_diff_mean"], rtol=0, atol=1e-12)


def test_the_console_names_the_figure(drawn):
    out, _, _ = drawn
    r = runner.invoke(app, ["compare", "--schedules", ARMS, "--seeds", "0,1", "--out", str(out), *TINY])
    assert r.exit_code == 0, r.output
    assert f"paired figure: {out / 'paired.png'}" in r.output  # finished: re-draws, trains nothing


def test_one_seed_draws_nothing_and_overwrite_removes_only_tlms_figure(drawn, tmp_path):
    out, _, _ = drawn
    mine = out / "notes.txt"
    mine.write_text("a user's file\n")
    r = _compare(out, "0", "--overwrite")
    assert r.exit_code == 0, r.output
    assert "paired_figure" not in json.loads(r.stdout)
    assert not (out / "paired.png").exists() and "paired.png" not in read_manifest(out)
    assert mine.read_text() == "a user's file\n"


def test_a_user_file_named_paired_png_is_never_replaced(tmp_path):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "paired.png").write_bytes(b"mine")
    r = _compare(out, "0,1", "--overwrite")
    assert r.exit_code == 1 and r.output.count("error:") == 1 and "paired.png" in r.output
    assert (out / "paired.png").read_bytes() == b"mine" and not (out / "runs").exists()


def test_demo_with_two_seeds_draws_it(real_demo_dir):
    doc = json.loads((real_demo_dir / "demo.json").read_text())
    png = real_demo_dir / "paired.png"
    assert png.read_bytes()[:8] == PNG and doc["figures"]["paired"] == str(png)
    assert "paired.png" in read_manifest(real_demo_dir)


def test_a_figure_needs_an_arm_with_two_pairs_and_a_finite_mean():
    from tlm_probe.stats.paired import has_interval

    def table(n, mean):
        return pd.DataFrame({"n_pairs": n, "val_loss_diff_mean": mean})

    assert has_interval(table([2, 1], [0.1, 0.2]), "val_loss")
    assert not has_interval(table([1, 1], [0.1, 0.2]), "val_loss")  # one pair: no interval
    assert not has_interval(table([2], [np.nan]), "val_loss")
    assert not has_interval(table([3], [np.inf]), "val_loss")
    assert not has_interval(table([2], [0.1]), "val_ppl") and not has_interval(None, "val_loss")


def test_a_re_run_with_one_seed_deletes_the_figure_of_two(tmp_path):
    """A comparison continued with fewer seeds rewrites its tables for those seeds: the earlier figure of
    two seeds would contradict them, so it goes (tlm wrote it); the user's files stay."""
    out = tmp_path / "cmp"
    assert _compare(out, "0,1").exit_code == 0 and (out / "paired.png").is_file()
    (out / "mine.txt").write_text("the user's\n")
    r = _compare(out, "0")
    assert r.exit_code == 0, r.output
    assert not (out / "paired.png").exists() and "paired.png" not in read_manifest(out)
    assert (out / "mine.txt").read_text() == "the user's\n"
    assert pd.read_csv(out / "paired.csv")["n_pairs"].max() == 1
