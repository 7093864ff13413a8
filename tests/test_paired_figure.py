"""`tlm plot CMP --kind paired`: each arm minus its baseline, paired by seed. The seeds it pairs, the dots,
the mean and the interval it draws are checked against a computation by hand here (dicts and scipy), on a
comparison folder written by compare's own table writer, with seeds missing on either side."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

from tlm_probe.cli import app
from tlm_probe.plotting.figures import build_figure
from tlm_probe.plotting.paired import seed_offsets
from tlm_probe.stats.paired import seed_differences
from tlm_probe.train.compare import COMPARE_COLUMNS, write_tables

# arm -> seed -> val_loss; cosine lacks seed 3 and uniform lacks seed 4, so each pairs on its own seeds
LOSSES = {
    "uniform": {0: 3.70, 1: 3.64, 2: 3.81, 3: 3.75},
    "cosine:1.5:0.5": {0: 3.71, 1: 3.66, 2: 3.80, 4: 3.90},
    "hourglass": {0: 3.68, 1: 3.69, 2: 3.74, 3: 3.72, 4: 3.60},
}


def _row(arm: str, seed: int, loss: float) -> dict:
    row = dict.fromkeys(COMPARE_COLUMNS, 0)
    row.update(arm=arm, mixer="attention", schedule=arm, seed=seed, val_loss=loss, val_ppl=math.exp(loss),
               val_bpb=loss / math.log(2) / 3.0, params=1000, flops_per_token=6000, tokens=4096,
               tokens_per_s=1.0, d_ff="64 64", heads="2 2", kv_heads="2 2", kv_bytes_per_token=64)
    return row


@pytest.fixture
def comparison(tmp_path):
    rows = [_row(arm, seed, loss) for arm, seeds in LOSSES.items() for seed, loss in seeds.items()]
    folder = tmp_path / "cmp"
    folder.mkdir()
    write_tables(folder, rows, settings={}, budget={}, baseline="uniform")
    return folder


def _by_hand(arm: str) -> tuple[list[int], np.ndarray]:
    seeds = sorted(set(LOSSES[arm]) & set(LOSSES["uniform"]))
    return seeds, np.array([LOSSES[arm][s] - LOSSES["uniform"][s] for s in seeds])


def test_seeds_are_paired_only_where_both_arms_have_them():
    results = pd.DataFrame([_row(a, s, v) for a, seeds in LOSSES.items() for s, v in seeds.items()])
    diffs = seed_differences(results, {"cosine:1.5:0.5": "uniform", "hourglass": "uniform"}, "val_loss")
    for arm in ("cosine:1.5:0.5", "hourglass"):
        seeds, expected = _by_hand(arm)
        mine = diffs[diffs["arm"] == arm]
        assert mine["seed"].tolist() == seeds
        np.testing.assert_allclose(mine["diff"], expected, rtol=0, atol=1e-12)
    assert seed_differences(results, {}, "val_loss").empty


def _drawn(fig):
    """Per row (top to bottom): the seed dots' x and y, the mean tick's x and the interval bar's ends."""
    ax = fig.axes[0]
    dots = [c for c in ax.collections if c.get_offsets().shape[0] > 1 or c.get_sizes()[0] < 100]
    ticks = [c for c in ax.collections if c not in dots]
    bars = [line for line in ax.lines if len(line.get_xdata()) == 2 and len(set(line.get_ydata())) == 1]
    return dots, ticks, bars, ax


def test_the_figure_draws_each_seed_the_mean_and_its_interval(comparison):
    fig = build_figure([comparison], kind="paired")
    dots, ticks, bars, ax = _drawn(fig)
    rows = sorted(zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels()), strict=True))[::-1]
    labels = [text for _, text in rows]  # top to bottom
    arms = ["cosine:1.5:0.5", "hourglass"]  # the paired table's order, drawn top to bottom
    assert [label.splitlines()[0] for label in labels] == arms
    for k, arm in enumerate(arms):
        y = len(arms) - 1 - k
        seeds, diff = _by_hand(arm)
        points = dots[k].get_offsets()
        np.testing.assert_allclose(points[:, 0], diff, rtol=0, atol=1e-12)
        np.testing.assert_allclose(points[:, 1], y + seed_offsets(len(seeds)), rtol=0, atol=1e-12)
        test = stats.ttest_rel([LOSSES[arm][s] for s in seeds], [LOSSES["uniform"][s] for s in seeds])
        low, high = test.confidence_interval(0.95)
        assert ticks[k].get_offsets()[0, 0] == pytest.approx(diff.mean(), abs=1e-12)
        np.testing.assert_allclose(bars[k].get_xdata(), [low, high], rtol=0, atol=1e-9)
        label = labels[k]
        assert f"Δ {diff.mean():+.4f} [{low:+.4f}, {high:+.4f}]" in label
        assert f"p {test.pvalue:.2g}" in label
        assert f"{int((diff < 0).sum())} of {len(seeds)} seeds below 0" in label
    smallest = min(stats.ttest_rel([LOSSES[a][s] for s in _by_hand(a)[0]],
                                   [LOSSES["uniform"][s] for s in _by_hand(a)[0]]).pvalue for a in arms)
    holm = min(1.0, 2 * smallest)  # Holm's first step over the two arms
    assert any(f"Holm {holm:.2g}" in label for label in labels)


def test_seed_offsets_spread_a_row_without_overlap():
    assert seed_offsets(1).tolist() == [0.0]
    offsets = seed_offsets(26)
    assert len(set(offsets.round(12))) == 26 and offsets.max() < 0.5 and offsets.min() > -0.5


def test_cli_writes_the_figure_and_refuses_what_it_cannot_draw(comparison, tmp_path):
    runner = CliRunner()
    out = tmp_path / "fig"
    out.mkdir()
    done = runner.invoke(app, ["plot", str(comparison), "--kind", "paired", "--out", str(out / "p.png")])
    assert done.exit_code == 0, done.output
    assert (out / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for args, says in (
        (["-s", "nope"], "no paired differences of 'nope'"),
        (["-s", "val_loss", "-s", "val_ppl"], "draws one statistic"),
    ):
        argv = ["plot", str(comparison), "--kind", "paired", *args, "--out", str(out / "q.png")]
        bad = runner.invoke(app, argv)
        assert bad.exit_code == 1 and bad.output.startswith("error:") and says in bad.output, bad.output
        assert len(bad.output.strip().splitlines()) == 1 and not (out / "q.png").exists()


def test_a_comparison_without_pairs_or_runs_is_one_line(comparison, tmp_path):
    runner = CliRunner()
    (comparison / "paired.csv").write_text("\n")
    bad = runner.invoke(app, ["plot", str(comparison), "--kind", "paired", "--out", str(tmp_path / "p.png")])
    assert bad.exit_code == 1 and "has no paired table yet" in bad.output, bad.output
    # a blank results table (a comparison with no finished run) was a KeyError in every comparison figure
    (comparison / "results.csv").write_text("\n")
    for kind in ("paired", "curves"):
        bad = runner.invoke(app, ["plot", str(comparison), "--kind", kind, "--out", str(tmp_path / "p.png")])
        assert bad.exit_code == 1 and bad.output.startswith("error:"), bad.output
        assert len(bad.output.strip().splitlines()) == 1 and isinstance(bad.exception, SystemExit)


def test_a_report_shows_the_figure_beside_the_paired_table(comparison, tmp_path):
    out = tmp_path / "report"
    done = CliRunner().invoke(app, ["report", str(comparison), "--out", str(out)])
    assert done.exit_code == 0, done.output
    page = (out / "report.md").read_text()
    table, figure = page.index("each arm against uniform, paired over seeds"), page.index("](figures/paired-")
    assert table < figure and "**" not in page[table + 50:figure]  # no other block between them
    (name,) = [p.name for p in (out / "figures").glob("paired-*.png")]
    assert (out / "figures" / name).read_bytes()[:4] == b"\x89PNG"


def test_study_1s_figure_draws_its_registered_contrasts(tmp_path):
    import shutil

    from analyses import paired_figure

    study = paired_figure.RESULTS / "confirm"
    runs = pd.read_csv(study / "runs.csv", dtype={"lr": str})
    main = runs[(runs["lr"] == "3e-3") & ~runs["source"]].pivot_table(index="seed", columns="arm",
                                                                      values="test_nll")
    diffs, summary = paired_figure.tables(study)
    assert summary["arm"].tolist() == ["cosine:1.5:0.5", "hourglass", "probe-derived.json"]
    for arm in summary["arm"]:  # nine seeds each, the differences by hand
        mine = diffs[diffs["arm"] == arm].set_index("seed")["diff"]
        assert mine.index.tolist() == list(range(9))
        np.testing.assert_allclose(mine, main[arm] - main["uniform"], rtol=0, atol=1e-12)
    # contrasts that the dots do not average to are refused, not drawn
    for name in ("runs.csv", "contrasts.csv"):
        shutil.copy(study / name, tmp_path / name)
    table = pd.read_csv(tmp_path / "contrasts.csv")
    table.loc[0, "diff_mean"] += 1e-4
    table.to_csv(tmp_path / "contrasts.csv", index=False)
    with pytest.raises(SystemExit, match="average"):
        paired_figure.tables(tmp_path)


def test_a_paired_arm_without_runs_is_one_line(comparison, tmp_path):
    results = pd.read_csv(comparison / "results.csv")
    results[results["arm"] != "hourglass"].to_csv(comparison / "results.csv", index=False)
    argv = ["plot", str(comparison), "--kind", "paired", "--out", str(tmp_path / "p.png")]
    bad = CliRunner().invoke(app, argv)
    assert bad.exit_code == 1 and "pairs 'hourglass', but results.csv holds no run" in bad.output, bad.output
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize("size", [(1000, 620), (1200, 800), (640, 480)])
def test_tick_labels_of_a_study_sized_spread_never_touch(size):
    """26 seeds spread over ±0.09 nats (study 2's scale): matplotlib's own locator put a tick every 0.025
    at 1000 px, and the labels (−0.075, −0.050, ...) ran into each other."""
    from figure_text import cut, overlaps

    from tlm_probe.plotting.paired import plot_paired

    rng = np.random.default_rng(0)
    diffs = pd.DataFrame([{"arm": arm, "baseline": "uniform", "seed": s, "diff": rng.uniform(-0.092, 0.079)}
                          for arm in ("probe-derived", "wide-first") for s in range(9, 35)])
    summary = pd.DataFrame([{"arm": a, "baseline": "uniform", "n_pairs": 26, "delta": -0.017,
                             "ci_low": -0.033, "ci_high": -0.001, "p": 0.036, "p_holm": 0.072}
                            for a in ("probe-derived", "wide-first")])
    fig = plot_paired(diffs, summary, "test_nll", size=size, title="Study 2: each arm − uniform")
    assert not overlaps(fig, ("xtick",)), overlaps(fig, ("xtick",))
    assert not cut(fig), cut(fig)
    assert len([t for t in fig.axes[0].get_xticks() if -0.1 <= t <= 0.09]) >= (3 if size[0] >= 1000 else 2)
