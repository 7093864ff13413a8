"""`tlm schedule --from-probe` and `tlm trust` (issue 33 part 2): a trust folder is a probe (the mean over
its corpora), and its corpora and its two disjoint halves check the schedule's stability: agreeing halves
→ written, the check recorded; planted disagreeing halves → one error line, nothing written;
--allow-unstable → written with a warning; --trust of another model is refused."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from test_from_probe import _model as scaled_model
from typer.testing import CliRunner

from cli import app
from tlm_probe.api.library import probe
from tlm_probe.results import write_results
from tlm_probe.schedules.rules import Rule, widths_from_statistic

runner = CliRunner()
STAT = "norm_ratio_mlp"


def _model(folder, scales, seed=3):
    """A model whose MLP l writes scales[l] x its initial output (tests/test_from_probe.py's)."""
    return scaled_model(folder, scales, seed)


@pytest.fixture(scope="module")
def trusted(tmp_path_factory):
    root = tmp_path_factory.mktemp("trusted")
    model = _model(root / "m", [4.0, 2.0, 1.0, 0.5])
    out = root / "t"
    r = runner.invoke(app, ["trust", str(model), "--data", "builtin:pydoc", "--data", "builtin:stdlib",
                            "--split", "val", "--max-tokens", "3000", "--seq-len", "32", "--stats",
                            f"{STAT},ablation_dnll_mlp_zero", "--task", "none", "--device", "cpu",
                            "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    return model, out


def _schedule(source, out, *extra):
    return runner.invoke(app, ["schedule", "--from-probe", str(source), "--statistic", STAT, "--multiple-of",
                               "32", *extra, "--out", str(out), "--json"])


def test_agreeing_halves_write_the_schedule_of_the_corpus_mean(trusted, tmp_path):
    _, folder = trusted
    halves = pd.read_csv(folder / "halves.csv")
    assert set(halves["half"]) == {"a", "b"} and set(halves["corpus"]) == {"builtin:pydoc", "builtin:stdlib"}
    r = _schedule(folder, tmp_path / "s.json")
    assert r.exit_code == 0, r.output
    assert "stability of norm_ratio_mlp across the two halves" in r.stderr and "NOT" not in r.stderr
    assert "across the corpora" in r.stderr
    doc = json.loads((tmp_path / "s.json").read_text())
    values = pd.read_csv(folder / "values.csv")
    mean = values[values["statistic"] == STAT].groupby("layer")["value"].mean().tolist()
    assert doc["widths"] == widths_from_statistic(mean, 256, 32, Rule())[0]  # the mean over the corpora
    check = doc["source"]["trust_stability"]
    assert check["halves"]["stable"] and check["halves"]["max_diff_units"] <= 1
    a, b = check["halves"]["widths"]["a"], check["halves"]["widths"]["b"]
    assert check["halves"]["max_diff_units"] == max(abs(x - y) for x, y in zip(a, b, strict=True)) / 32


def test_planted_disagreeing_halves_are_refused_unless_allowed(trusted, tmp_path):
    _, folder = trusted
    planted = tmp_path / "planted"
    shutil.copytree(folder, planted)
    halves = pd.read_csv(planted / "halves.csv")
    for corpus in halves["corpus"].unique():  # half b's values run the other way across layers
        rows = (halves["half"] == "b") & (halves["statistic"] == STAT) & (halves["corpus"] == corpus)
        halves.loc[rows, "value"] = halves.loc[rows, "value"].to_numpy()[::-1]
    halves.to_csv(planted / "halves.csv", index=False)
    out = tmp_path / "u.json"
    bad = _schedule(planted, out)
    assert bad.exit_code == 1 and not out.exists()
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "not stable across the two halves" in errors[0], bad.stderr
    assert "Traceback" not in bad.output
    forced = _schedule(planted, out, "--allow-unstable")
    assert forced.exit_code == 0, forced.output
    assert "warning: writing a schedule that is not stable across the two halves" in forced.stderr
    assert json.loads(out.read_text())["source"]["trust_stability"]["halves"]["stable"] is False


def test_a_probe_folder_takes_its_stability_from_trust_of_the_same_model(trusted, tmp_path):
    model, folder = trusted
    res = probe(str(model), "builtin:pydoc", stats=STAT, max_tokens=3000, seq_len=32, split="val", full=True)
    write_results(tmp_path / "p", res.table, res.matrices, res.provenance)
    plain = _schedule(tmp_path / "p", tmp_path / "plain.json")
    assert plain.exit_code == 0 and "stability: not checked" in plain.stderr
    ok = _schedule(tmp_path / "p", tmp_path / "s.json", "--trust", str(folder))
    assert ok.exit_code == 0, ok.output
    assert "trust_stability" in json.loads((tmp_path / "s.json").read_text())["source"]
    other = _model(tmp_path / "other", [1.0, 1.0, 1.0, 1.0], seed=5)
    res = probe(str(other), "builtin:pydoc", stats=STAT, max_tokens=500, seq_len=32, split="val", full=True)
    write_results(tmp_path / "q", res.table, res.matrices, res.provenance)
    bad = _schedule(tmp_path / "q", tmp_path / "x.json", "--trust", str(folder))
    assert bad.exit_code == 1 and "probed another model" in bad.output and not (tmp_path / "x.json").exists()


def test_a_half_with_no_sequence_is_one_error_line(tmp_path):
    import numpy as np

    model = _model(tmp_path / "m", [1.0, 1.0])
    ids, other = tmp_path / "one.npy", tmp_path / "other.npy"
    np.save(ids, np.random.default_rng(0).integers(5, 100, (1, 32)).astype(np.uint32))  # one sequence
    np.save(other, np.random.default_rng(1).integers(5, 100, (1, 32)).astype(np.uint32))
    r = runner.invoke(app, ["trust", str(model), "--data", str(ids), "--data", str(other), "--stats",
                            f"{STAT},ablation_dnll_mlp_zero", "--task", "none", "--device", "cpu",
                            "--out", str(tmp_path / "t")])
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert r.exit_code == 1 and len(errors) == 1 and "--no-halves" in errors[0], r.output


@pytest.mark.parametrize("table", ["values.csv", "halves.csv"])
def test_a_word_where_a_value_belongs_is_one_error_line_naming_the_cell(trusted, tmp_path, table):
    """The trust tables are read as every other table (files.tablefile.numeric_columns): a word in `value`
    is refused naming its file, column and cell, not coerced to NaN and reported as a missing layer."""
    _, folder = trusted
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    df = pd.read_csv(broken / table)
    df["value"] = df["value"].astype(object)
    df.loc[df.index[df["statistic"] == STAT][0], "value"] = "high"
    df.to_csv(broken / table, index=False)
    out = tmp_path / "s.json"
    r = _schedule(broken, out)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.exit_code == 1 and not out.exists(), r.output
    assert len(errors) == 1 and f"{table}: column 'value' holds a non-number ('high')" in errors[0], r.stderr
