"""Issue 49, "check what was read", for the probe and comparison folders (result_checks.py, with the checks
of files/value_checks.py that the diff and trust readers use): a hostile results.csv, matrices.csv,
results/summary/paired.csv of a comparison or a run's metrics.jsonl (wrong types, inf, NaN where a layer or
a step belongs, out-of-range values, a row twice, a million rows) is one `error:` line naming the file and
the column from `tlm plot` and `tlm report` (a million rows in a child under a memory cap), never a figure
drawn from it, a traceback or a hang; every real folder in analyses/results still reads. Before: each of
these was drawn with exit 0, and the million-row results.csv kept `tlm report` busy past 90 s."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from hostile_runs import one_refusal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tlm_probe.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "analyses" / "results" / "mechanism" / "smollm2" / "builtin"  # 30 layers, 300 rows
COMPARE = ROOT / "analyses" / "results" / "schedules"
RUN = ROOT / "analyses" / "results" / "mixers" / "issue19_indicative" / "hope_attention"


def _set(name: str, col: str, value, row: int = 0):
    def edit(folder: Path):
        df = pd.read_csv(folder / name)
        df[col] = df[col].astype(object)
        df.loc[row, col] = value
        df.to_csv(folder / name, index=False)
    return edit


def _twice(name: str):
    def edit(folder: Path):
        df = pd.read_csv(folder / name)
        pd.concat([df, df.head(1)]).to_csv(folder / name, index=False)
    return edit


def _many(name: str, n: int = 10**6):
    def edit(folder: Path):
        last = (folder / name).read_text().splitlines()[-1]
        with (folder / name).open("a") as f:
            f.write((last + "\n") * n)
    return edit


def _matrices(layer_i) -> callable:
    def edit(folder: Path):
        pd.DataFrame({"model": "m", "layer_i": [0, layer_i], "layer_j": [0, 1], "statistic": "cka",
                      "value": [1.0, 0.5]}).to_csv(folder / "matrices.csv", index=False)
    return edit


def _metrics(record: dict):
    def edit(folder: Path):
        with (folder / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")  # json.dumps writes inf as the bare word Infinity
    return edit


CASES = {  # case -> (source folder, edit, words the one error line holds)
    "results: layer 10**6": (PROBE, _set("results.csv", "layer", 10**6), "'layer'"),
    "results: layer 1.5": (PROBE, _set("results.csv", "layer", 1.5), "'layer'"),
    "results: layer past the model's 30": (PROBE, _set("results.csv", "layer", 30), "'layer'"),
    "results: depth 7": (PROBE, _set("results.csv", "depth", 7.0), "'depth'"),
    "results: depth empty": (PROBE, _set("results.csv", "depth", math.nan), "'depth'"),
    "results: value inf": (PROBE, _set("results.csv", "value", math.inf), "'value'"),
    "results: n_tokens -3": (PROBE, _set("results.csv", "n_tokens", -3), "'n_tokens'"),
    "results: a row twice": (PROBE, _twice("results.csv"), "one per model, layer, statistic"),
    "results: 10**6 rows": (PROBE, _many("results.csv"), "rows"),
    "matrices: layer_i 10**6": (PROBE, _matrices(10**6), "'layer_i'"),
    "compare results: val_loss inf": (COMPARE, _set("results.csv", "val_loss", math.inf), "'val_loss'"),
    "compare results: seed 1.5": (COMPARE, _set("results.csv", "seed", 1.5), "'seed'"),
    "compare results: a run twice": (COMPARE, _twice("results.csv"), "one per arm, mixer, seed"),
    "compare summary: n_seeds 0": (COMPARE, _set("summary.csv", "n_seeds", 0), "'n_seeds'"),
    "compare paired: p 2": (COMPARE, _set("paired.csv", "val_loss_p", 2.0), "'val_loss_p'"),
    "compare results: 10**6 rows": (COMPARE, _many("results.csv"), "rows"),
    "run: val_loss Infinity": (RUN, _metrics({"step": 999, "tokens": 5, "val_loss": math.inf}), "'value'"),
    "run: val_loss a word": (RUN, _metrics({"step": 999, "tokens": 5, "val_loss": "low"}), "'value'"),
    "run: step -1": (RUN, _metrics({"step": -1, "tokens": 5, "val_loss": 3.0}), "'step'"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_folder_is_one_error_line_in_plot_and_report(tmp_path, case):
    src, edit, says = CASES[case]
    folder = tmp_path / "in"
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("*.png", "*.md"))
    edit(folder)
    plot = ["plot", str(folder), "--out", str(tmp_path / "f.png"), "--size", "300x200"]
    report = ["report", str(folder), "--out", str(tmp_path / "r"), "--size", "300x200"]
    big = "10**6 rows" in case
    # a lone run folder is drawn by `tlm plot --kind curves`; `tlm report` wants a probe beside it
    curves = [*plot, "--kind", "curves", "--statistic", "val_loss"]
    for args in [report] if big else [curves] if src == RUN else [plot, report]:
        # big: in a child under a memory cap, as a user meets it (the row bound keeps it small and quick)
        line = one_refusal(args, in_child=big)
        assert says in line, line
        assert not (tmp_path / "f.png").exists() and not (tmp_path / "r" / "report.html").exists()


def test_the_real_folders_pass_the_checks():
    from tlm_probe.plotting.inputs import input_kind, load_comparison, load_probe, load_run

    loaders = {"probe": load_probe, "compare": load_comparison, "run": load_run}
    seen = set()
    for marker in ("provenance.json", "compare.json", "metrics.jsonl"):
        for path in ROOT.glob(f"analyses/results/**/{marker}"):
            kind = input_kind(path.parent)
            if kind in loaders:
                loaders[kind](path.parent)
                seen.add(kind)
    assert seen == set(loaders)


FUZZ = settings(max_examples=int(os.environ.get("TLM_FUZZ_EXAMPLES", "100")), deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
cells = st.one_of(st.integers(-2, 10**7), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5),
                  st.just(""))


def _edits(df: pd.DataFrame):
    """1-3 cells (row, column) of `df`, each set to any value."""
    cell = st.tuples(st.integers(0, len(df) - 1), st.sampled_from(list(df.columns)), cells)
    return st.lists(cell, min_size=1, max_size=3)


def _edited(src: Path, name: str, rows: list[tuple[int, str, object]]) -> str:
    df = pd.read_csv(src / name)
    for row, col, value in rows:
        df[col] = df[col].astype(object)
        df.loc[row % len(df), col] = value
    text = df.to_csv(index=False)
    return text


def _only_user_errors(fn) -> None:
    try:
        fn()
    except UserError:
        pass


@FUZZ
@given(data=st.data())
def test_probe_folder_reader(tmp_path_factory, data):
    """Any cell of results.csv set to any value: read_results gives a table whose layers, depths and values
    the figures can take, or one UserError; the depth figure draws what passes."""
    from tlm_probe.plotting.inputs import load_probe

    df = pd.read_csv(PROBE / "results.csv")
    edits = data.draw(_edits(df))
    folder = tmp_path_factory.mktemp("p") / "in"
    shutil.copytree(PROBE, folder)
    (folder / "results.csv").write_text(_edited(PROBE, "results.csv", edits))

    def read():
        table = load_probe(folder).table
        assert table["layer"].between(0, 29).all() and table["depth"].between(0, 1).all()
        assert not table["value"].isin([math.inf, -math.inf]).any()
        assert not table.duplicated(["model", "layer", "statistic"]).any()
    _only_user_errors(read)


@FUZZ
@given(data=st.data())
def test_compare_folder_reader(tmp_path_factory, data):
    from tlm_probe.plotting.inputs import load_comparison

    name = data.draw(st.sampled_from(["results.csv", "summary.csv", "paired.csv"]))
    df = pd.read_csv(COMPARE / name)
    edits = data.draw(_edits(df))
    folder = tmp_path_factory.mktemp("c") / "in"
    shutil.copytree(COMPARE, folder, ignore=shutil.ignore_patterns("*.png"))
    (folder / name).write_text(_edited(COMPARE, name, edits))

    def read():
        tables = load_comparison(folder).tables
        for table in tables.values():
            numbers = table.select_dtypes("number")
            assert not numbers.isin([math.inf, -math.inf]).any().any()
    _only_user_errors(read)
