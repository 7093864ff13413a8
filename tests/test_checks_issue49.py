"""Issue 49, "check first, check what was read": `tlm diff` refuses a model with non-finite activations in one
line through the guard every command shares; diff.json holds no bare NaN; the diff and trust readers
refuse wrong types, NaN, out-of-range layers and row counts tlm never writes (hostile ones in a child
under a memory cap), and plotting bounds what it draws."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hostile_runs import TASK_YAML, error_lines, one_refusal
from typer.testing import CliRunner

from cli import app
from tlm_probe.errors import UserError
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM

ROOT = Path(__file__).resolve().parents[1]
DIFF = ROOT / "analyses" / "results" / "confirm" / "diff" / "cosine_1.5_0.5-s0-vs-uniform-s0"  # a real one
TRUST = ROOT / "analyses" / "results" / "trust" / "SmolLM2-135M-Q4_1-task16"
runner = CliRunner()


def tiny(folder: Path, seed: int = 0, vocab: int = 64, poison: bool = False) -> Path:
    """A tiny tlm checkpoint; `poison`: one MLP weight matrix all NaN."""
    torch.manual_seed(seed)
    cfg = TLMConfig(vocab_size=vocab, d_model=32, n_layers=2, n_heads=4, d_ff=(64, 64), max_seq_len=64)
    model = TaperedLM(cfg).eval()
    if poison:
        with torch.no_grad():
            next(p for n, p in model.named_parameters() if "mlp" in n).fill_(float("nan"))
    return save_tlm(model, folder)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    ids = root / "ids.npy"
    np.save(ids, np.random.default_rng(0).integers(1, 64, (8, 16)).astype(np.uint32))
    return {"a": tiny(root / "a"), "nan": tiny(root / "nan", poison=True), "ids": ids, "root": root}


# ---- 1. one non-finite guard, shared ---------------------------------------------------------------------
def test_diff_refuses_a_nan_model_in_one_line_and_writes_nothing(models, tmp_path):
    out = tmp_path / "d"
    r = runner.invoke(app, ["diff", str(models["nan"]), str(models["a"]), "--data", str(models["ids"]),
                            "--out", str(out)])
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output and r.exception is None or isinstance(r.exception, SystemExit)
    (line,) = error_lines(r.output)
    assert line.startswith("error: non-finite activations (inf/NaN) in nan at layer 0 in mlp_out"), line
    assert not out.exists()


def test_probe_refuses_the_same_model_with_the_same_guard(models, tmp_path):
    r = runner.invoke(app, ["probe", str(models["nan"]), "--data", str(models["ids"]), "--out",
                            str(tmp_path / "p"), "--stats", "align_mlp_mid"])
    assert r.exit_code == 1, r.output
    (line,) = error_lines(r.output)
    assert line.startswith("error: non-finite activations (inf/NaN) at layer 0"), line


def test_the_guard_names_the_first_piece_at_fault():
    from tlm_probe.capture.finite import NonFiniteError, refuse_non_finite

    ok, bad = torch.ones(3), torch.tensor([1.0, math.inf])
    refuse_non_finite([(0, "x", ok), (1, "y", None)])
    with pytest.raises(NonFiniteError, match="in m at layer 1 in mlp_out"):
        refuse_non_finite([(0, "resid_post", ok), (1, "mlp_out", bad), (2, "resid_post", bad)], model="m")


def test_diff_json_never_holds_a_bare_nan(tmp_path):
    from tlm_probe.diff.engine import DiffResult, write_diff

    summary = {"model_a": "a", "model_b": "b", "n_layers": [1, 1], "d_model": [4, 4], "d_ff": [[8], [8]],
               "cka": [[None]], "cka_mlp": None, "best_match": [None], "drift": [None], "drift_pairing":
               "layer", "drift_layers_b": [0], "kl_mean": math.nan, "dnll_mean": math.inf, "n_tokens": 3,
               "n_predictions": 0, "buckets": [], "options": {"x": math.nan}}
    write_diff(tmp_path / "d", DiffResult(summary, np.full((1, 1), np.nan), [math.nan]))
    text = (tmp_path / "d" / "diff.json").read_text()

    def refuse(name):
        raise AssertionError(f"bare {name} in diff.json")

    doc = json.loads(text, parse_constant=refuse)
    assert doc["kl_mean"] is None and doc["dnll_mean"] is None and doc["options"]["x"] is None


def test_the_summary_prints_a_layer_without_any_cka():
    from tlm_probe.commands.diff import _layer_line

    assert _layer_line(0, [None, None], None, None) == \
        "  layer 0: CKA with B's layer 0 n/a, best match B? (n/a); drift n/a"


# ---- 2. the diff and trust readers check what they read --------------------------------------------------
def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _json_edit(key, value):
    def edit(folder: Path, name: str):
        path = folder / name
        doc = json.loads(path.read_text())
        doc[key] = value
        path.write_text(json.dumps(doc))  # json.dumps writes a NaN as the bare word NaN
    return edit


def _csv_append(rows: list[dict] | None = None, n: int = 0):
    """Append `rows`, or `n` copies of the last line."""
    def edit(folder: Path, name: str):
        path = folder / name
        if n:
            last = path.read_text().splitlines()[-1]
            with path.open("a") as f:
                f.write((last + "\n") * n)
            return
        df = pd.read_csv(path)
        pd.concat([df, pd.DataFrame(rows)], ignore_index=True).to_csv(path, index=False)
    return edit


def _csv_set(col: str, value):
    """Set `col` of the first row."""
    def edit(folder: Path, name: str):
        df = pd.read_csv(folder / name)
        df[col] = df[col].astype(object)
        df.loc[0, col] = value
        df.to_csv(folder / name, index=False)
    return edit


def _cka_row(i, j, value=0.5):
    return [{"model": "x", "layer_i": i, "layer_j": j, "statistic": "cka_resid", "value": value}]


DIFF_CASES = {  # case -> (file, edit, words the one error line must hold)
    "kl_mean NaN": ("diff.json", _json_edit("kl_mean", math.nan), "kl_mean"),
    "n_tokens a word": ("diff.json", _json_edit("n_tokens", "many"), "n_tokens"),
    "cka a word": ("diff.json", _json_edit("cka", "x"), "cka"),
    "n_layers 10**6": ("diff.json", _json_edit("n_layers", [10**6, 4]), "n_layers"),
    "best_match out of range": ("diff.json", _json_edit("best_match", [99] * 4), "best_match"),
    "cka.csv row at layer 10**6": ("cka.csv", _csv_append(_cka_row(10**6, 0)), "layer_i"),
    "cka.csv row at layer -1": ("cka.csv", _csv_append(_cka_row(-1, 0)), "layer_i"),
    "cka.csv value 7": ("cka.csv", _csv_append(_cka_row(0, 0, 7.0)), "value"),
    "tokens.csv of 10**6 rows": ("tokens.csv", _csv_append(n=10**6), "rows"),
    "layers.csv depth 3": ("layers.csv", _csv_set("depth", 3.0), "depth"),
    "tokens.csv n a word": ("tokens.csv", _csv_set("n", "lots"), "'n'"),
}
TRUST_CASES = {
    "min_w NaN": ("trust.json", _json_edit("min_w", math.nan), "min_w"),
    "corpora a number": ("trust.json", _json_edit("corpora", 3), "corpora"),
    "task_target a list": ("trust.json", _json_edit("task_target", [1]), "task_target"),
    "trust.csv of 10**6 rows": ("trust.csv", _csv_append(n=10**6), "rows"),
    "kendall_w 2": ("trust.csv", _csv_set("kendall_w", 2.0), "kendall_w"),
    "a statistic twice": ("trust.csv", _csv_append([{"statistic": "block_influence", "kendall_w": 0.5,
                                                     "flags": "ok"}]), "statistic"),
}


def test_the_real_folders_pass_the_checks():
    from tlm_probe.plotting.inputs import load_diff, load_trust

    for folder in ROOT.glob("analyses/results/**/diff.json"):
        load_diff(folder.parent)
    for folder in ROOT.glob("analyses/results/**/trust.json"):
        load_trust(folder.parent)


@pytest.mark.parametrize("case", [*DIFF_CASES, *TRUST_CASES])
def test_a_hostile_folder_is_one_error_line_in_plot_and_report(tmp_path, case):
    src, (name, edit, says) = (DIFF, DIFF_CASES[case]) if case in DIFF_CASES else (TRUST, TRUST_CASES[case])
    folder = _copy(src, tmp_path / "in")
    edit(folder, name)
    big = "rows" in case
    plot = ["plot", str(folder), "--out", str(tmp_path / "f.png"), "--size", "300x200"]
    report = ["report", str(folder), "--out", str(tmp_path / "r"), "--size", "300x200"]
    for args in [plot] if big else [plot, report]:  # both read through the one reader (load_diff/load_trust)
        line = one_refusal(args, in_child=big, timeout=120)  # big: a capped child (the bound keeps it small)
        assert says in line and name.split(".")[0] in line, line
        assert not (tmp_path / "f.png").exists()


def test_plotting_bounds_what_it_draws():
    from tlm_probe.plotting.diff import cka_grid
    from tlm_probe.plotting.trust import plot_trust

    for i in (-1, 10**6):
        with pytest.raises(UserError, match="layers must be"):
            cka_grid(pd.DataFrame(_cka_row(i, 0)))
    table = pd.DataFrame({"statistic": [f"s{i}" for i in range(5000)], "kendall_w": 0.5, "flags": "ok"})
    with pytest.raises(UserError, match="5,000 statistics"):
        plot_trust(table, thresholds={"min_w": 0.5, "min_spearman": 0.5}, model="m", corpora=["a", "b"])


# ---- 3. lm-eval's failures are one error line; eval checks its --out first ---------------------------------
GOOD_LINE = '{"context": "a", "choices": ["b", "c"], "label": 0}\n'


@pytest.mark.parametrize(("data", "says"), [
    ("", "is empty"),
    ("\n\n", "holds no documents"),
    (GOOD_LINE + '{"context": "a", "choic\n', "t.jsonl:2 is not valid JSON"),
    (GOOD_LINE + "[1, 2]\n", "document 2 is a JSON list"),
])
@pytest.mark.parametrize("command", ["eval", "trust"])
def test_a_bad_task_data_file_is_one_line_naming_the_task_and_file(models, tmp_path, data, says, command):
    (tmp_path / "t.yaml").write_text(TASK_YAML)
    (tmp_path / "t.jsonl").write_text(data)
    task = str(tmp_path / "t.yaml")
    args = {"eval": ["eval", str(models["a"]), "--tasks", task, "--out", str(tmp_path / "o")],
            "trust": ["trust", str(models["a"]), "--data", str(models["ids"]), "--data", "builtin:pydoc",
                      "--task", task, "--out", str(tmp_path / "o")]}[command]
    r = runner.invoke(app, args)
    assert r.exit_code == 1, r.output
    (line,) = error_lines(r.output)
    assert "task 'mytask'" in line and str(tmp_path / "t.jsonl") in line and says in line, line
    assert "loaded" not in r.output  # refused before the model loads
    assert not (tmp_path / "o" / "results.csv").exists()


def test_what_datasets_raises_in_the_harness_is_one_line():
    from datasets.exceptions import DatasetGenerationError

    from tlm_probe.eval.run import harness_data_errors

    with pytest.raises(UserError, match="could not read the data of task\\(s\\) a, b: no documents"):
        with harness_data_errors(["a", "b"]):
            raise StopIteration
    with pytest.raises(UserError, match="task\\(s\\) t: JSON parse error"):
        with harness_data_errors(["t"]):
            try:
                raise ValueError("JSON parse error at line 2")
            except ValueError as e:
                raise DatasetGenerationError("An error occurred") from e


def test_eval_refuses_to_replace_a_users_results_before_loading(models, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "results.csv").write_text("my,own\n")
    r = runner.invoke(app, ["eval", str(models["a"]), "--tasks", "pydoc-mc", "--out", str(out)])
    assert r.exit_code == 1, r.output
    (line,) = error_lines(r.output)
    assert "refusing to replace" in line and "results.csv" in line
    assert "loaded" not in r.output and (out / "results.csv").read_text() == "my,own\n"


# ---- 4. no silent acceptance ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    from models_zoo import build_model

    root = tmp_path_factory.mktemp("gpt2")
    return {"tok": build_model("gpt2", root / "g"), "bare": build_model("gpt2", root / "n", tokenizer=False)}


@pytest.mark.parametrize(("mapping", "says"), [
    ({"transformer.h.0": "cpu"}, "places 12 of the model's 41 parameters"),
    ({"nothing": "cpu"}, "names 'nothing', which is no module of the model"),
    ({}, "places 0 of the model's 41 parameters"),
])
def test_a_device_map_must_place_every_parameter(gpt2, models, tmp_path, mapping, says):
    path = tmp_path / "map.json"
    path.write_text(json.dumps(mapping))
    r = runner.invoke(app, ["probe", str(gpt2["tok"]), "--data", str(models["ids"]), "--out",
                            str(tmp_path / "o"), "--device-map", str(path)])
    assert r.exit_code == 1, r.output
    (line,) = error_lines(r.output)
    assert says in line and "top-level modules: transformer, lm_head" in line, line
    assert not (tmp_path / "o").exists()


def test_a_whole_device_map_still_loads(gpt2, models, tmp_path):
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"transformer": "cpu", "lm_head": "cpu"}))
    r = runner.invoke(app, ["probe", str(gpt2["tok"]), "--data", str(models["ids"]), "--out",
                            str(tmp_path / "o"), "--device-map", str(path), "--stats", "align_mlp_mid"])
    assert r.exit_code == 0, r.output


@pytest.fixture(scope="module")
def half_a(models, tmp_path_factory):
    from tlm_probe.api.library import probe
    from tlm_probe.results import write_results

    out = tmp_path_factory.mktemp("halves") / "a"
    res = probe(str(models["a"]), str(models["ids"]), stats="norm_ratio_mlp", half="a", full=True)
    write_results(out, res.table, res.matrices, res.provenance)
    return out


def _edited_probe(src: Path, dst: Path, **prov) -> Path:
    dst.mkdir()
    (dst / "results.csv").write_text((src / "results.csv").read_text())
    doc = json.loads((src / "provenance.json").read_text())
    for key, value in prov.items():
        parent, _, leaf = key.rpartition(".")
        (doc[parent] if parent else doc)[leaf] = value
    (dst / "provenance.json").write_text(json.dumps(doc))
    return dst


def test_check_with_refuses_what_makes_it_vacuous(half_a, tmp_path):
    base = ["schedule", "--statistic", "norm_ratio_mlp", "--multiple-of", "32", "--out",
            str(tmp_path / "s.json")]
    other = _edited_probe(half_a, tmp_path / "other", content_hash="f" * 64, **{"options.half": "b"})
    same_half = _edited_probe(half_a, tmp_path / "same")
    half_b = _edited_probe(half_a, tmp_path / "b", **{"options.half": "b"})
    cases = {
        (): "--check-with is read only with --from-probe",
        ("--from-probe", str(half_a)): "is the --from-probe folder itself",
        ("--from-probe", str(other)): "probed another model",
        ("--from-probe", str(same_half)): "both probed half 'a' of",
    }
    for extra, says in cases.items():
        r = runner.invoke(app, [*(base if extra else base[:1]), *extra, "--check-with", str(half_a)])
        assert r.exit_code == 1, (extra, r.output)
        (line,) = error_lines(r.output)
        assert says in line, line
        assert not (tmp_path / "s.json").exists()
    ok = runner.invoke(app, [*base, "--from-probe", str(half_b), "--check-with", str(half_a)])
    assert ok.exit_code == 0, ok.output


def test_diff_says_when_it_skips_the_tokenizer_check(gpt2, tmp_path):
    r = runner.invoke(app, ["diff", str(gpt2["tok"]), str(gpt2["bare"]), "--data", "builtin:pydoc",
                            "--max-tokens", "128", "--out", str(tmp_path / "d")])
    assert r.exit_code == 0, r.output
    notes = [ln for ln in r.output.splitlines() if "no tokenizer" in ln]
    assert notes == ["note: n has no tokenizer: the check that both models give the same ids to the same "
                     "text was skipped (only the vocabulary sizes were compared: 320 ids)"], r.output


def test_a_yaml_key_given_twice_is_refused(tmp_path):
    from tlm_probe.files.yamlfile import load_file

    (tmp_path / "c.yaml").write_text("model:\n  d_model: 64\n  n_layers: 2\n  d_model: 128\n")
    with pytest.raises(UserError, match="holds the key 'd_model' twice \\(lines 2 and 4\\)"):
        load_file(tmp_path / "c.yaml")
    (tmp_path / "m.yaml").write_text("base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\n")
    assert load_file(tmp_path / "m.yaml")["other"] == {"x": 1, "y": 2}
    r = runner.invoke(app, ["train", "--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "o")])
    assert r.exit_code == 1 and "twice" in r.output, r.output


def test_eval_refuses_a_nan_model_with_the_same_guard(models, tmp_path):
    out = tmp_path / "ev"
    r = runner.invoke(app, ["eval", str(models["nan"]), "--ppl-data", str(models["ids"]),
                            "--max-tokens", "64", "--out", str(out)])
    assert r.exit_code == 1, r.output
    (line,) = error_lines(r.output)
    assert line.startswith("error: non-finite activations (inf/NaN) in nan in logits"), line
    assert not (out / "results.csv").exists()


def test_trust_refuses_a_text_corpus_with_an_empty_half_before_probing_any(gpt2, tmp_path, monkeypatch):
    """A text corpus's sequences need the tokenizer: judged once the model loads, before the first probe
    (it was found after every corpus before it had been probed in full)."""
    import tlm_probe.trust.engine as engine

    def no_probe(*args, **kwargs):
        raise AssertionError("a corpus was probed before the halves were judged")

    monkeypatch.setattr(engine, "run_probe", no_probe)
    short = tmp_path / "short.txt"
    short.write_text("hi\n")
    r = runner.invoke(app, ["trust", str(gpt2["tok"]), "--data", "builtin:pydoc", "--data", str(short),
                            "--seq-len", "32", "--out", str(tmp_path / "o")])
    assert r.exit_code == 1, r.output
    (line,) = error_lines(r.output)
    assert f"half b of {short} holds no sequence" in line and "--no-halves" in line, line
    assert not (tmp_path / "o").exists()
