"""One declaration path for options (issue 45): closed choices are `Literal[...]` fields refused in one line
(exit 1) by the CLI and by the library alike, every boolean reads --x/--no-x, TrainConfig's --config file
may use its four sections, committed runs' train_config.json still load, and the command modules keep
their functions short."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from cli_commands import all_commands
from typer.testing import CliRunner

from cli import app
from tlm_probe.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def test_every_boolean_reads_one_style():
    bools = {(n, p.name): p for n, c in all_commands().items() for p in c.params
             if p.param_type_name == "option" and p.is_bool_flag and p.name != "help"}
    assert len(bools) > 30
    off = {k: p.opts + p.secondary_opts for k, p in bools.items() if p.secondary_opts != [
        "--no-" + p.opts[0][2:]]}
    assert off == {}


@pytest.mark.parametrize(("args", "needle"), [
    (["probe", "m", "--dtype", "float8", "--out", "o"], "--dtype must be one of float32, float64, bfloat16, "
                                                        "float16, got 'float8'"),
    (["probe", "m", "--half", "c", "--out", "o"], "--half must be one of '', a, b, got 'c'"),
    (["trust", "m", "--target-ablation", "head", "--out", "o"], "--target-ablation must be one of mlp"),
    (["train", "--eval-sample", "first", "--out", "o"], "--eval-sample must be one of spread, prefix"),
    (["train", "--preset", "tlm-huge", "--out", "o"], "--preset must be one of '', tlm-"),
])
def test_a_closed_choice_is_refused_by_the_parser_in_one_line(tmp_path, args, needle):
    r = CliRunner().invoke(app, [a if a not in ("m", "o") else str(tmp_path / a) for a in args])
    assert r.exit_code == 1 and needle in r.stderr, r.output
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_the_library_refuses_the_same_choices_with_the_same_words():
    from tlm_probe.eval.run import EvalOptions
    from tlm_probe.generation import GenerateOptions
    from tlm_probe.probe.options import ProbeOptions
    from tlm_probe.train.config import TrainConfig

    for make, needle in ((lambda: ProbeOptions(dtype="float8"), "--dtype must be one of float32"),
                         (lambda: GenerateOptions(dtype="int4"), "--dtype must be one of float32"),
                         (lambda: EvalOptions(split="held-out"), "--split must be one of auto"),
                         (lambda: TrainConfig(steps=1, eval_sample="x"), "--eval-sample must be one of")):
        with pytest.raises(UserError, match=needle):
            make()


def test_help_shows_the_choices_and_no_prose_list():
    out = CliRunner().invoke(app, ["probe", "--help"], env={"COLUMNS": "250"}).output
    assert "[float32 | float64 | bfloat16 | float16]" in out and "[auto | train | val | test | all]" in out
    assert out.count("float32 | float64") == 1 and "auto | val | train" not in out  # once: the metavar


def _help(args: list[str], columns: int) -> str:
    return CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(columns)}).output


def test_help_leaves_the_help_text_room_at_80_columns():
    """typer gave the `--no-x` forms a column of their own and let a long choice list set the width of the
    help column: at 80 columns `tlm probe --help` left its help text 16 characters (22 at 100, 30 at 120).
    Now an off-by-default flag shows `--x` alone, and a long choice list ends the help text."""
    for columns, least in ((80, 30), (100, 50), (120, 70)):
        lines = _help(["probe"], columns).splitlines()
        row = next(line for line in lines if "--seq-len" in line)
        assert len(row) - row.index("Tokens per sequence") - 2 >= least, (columns, row)
        assert not [line for line in lines if "--no-" in line]
    shown = _help(["probe"], 250)
    assert "[float32 | float64 | bfloat16 | float16]" in shown  # --dtype's choices, not read as rich markup


def test_help_shows_an_on_by_default_flag_with_its_off_form_and_every_off_form_still_parses():
    demo = _help(["demo"], 100)
    row = next(line for line in demo.splitlines() if "--probe/--no-probe" in line)
    assert "[default: on]" in demo[demo.index(row):demo.index("--overwrite")]
    assert "--no-x" in " ".join(_help(["train"], 100).split())  # --config says how to turn a flag off
    out = CliRunner().invoke(app, ["schedule", "--schedule", "uniform", "--layers", "2", "--d-ff", "64",
                                   "--no-json", "--no-allow-unstable"])
    assert out.exit_code == 0, out.output


def test_the_cli_page_shows_a_choice_list_as_help_shows_it():
    import importlib.util

    spec = importlib.util.spec_from_file_location("generated", ROOT / "docs/hooks/generated.py")
    generated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generated)
    page = generated.cli_reference()
    assert "[float32 | float64 | bfloat16 | float16]" in page and "\\[" not in page


def test_a_long_choice_list_wraps_between_choices():
    """--kind's ten choices in the metavar's narrow column: at 100 columns they once broke inside words
    ("cur" / "ves"); spaced, every choice stays whole."""
    out = CliRunner().invoke(app, ["plot", "--help"], env={"COLUMNS": "100"}).output
    lines = out.splitlines()
    first = next(i for i, text in enumerate(lines) if "--kind" in text)
    words = set(re.findall(r"[a-z]+", " ".join(lines[first:first + 5])))
    assert {"depth", "heatmap", "importance", "curves", "schedules", "trajectory", "advantage"} <= words


SECTIONED = """
[model]
d_model = 32
n_layers = 2
schedule = "cosine:1.5:0.5"
multiple_of = 16
[optim]
lr = 0.001
steps = 7
[data]
data = "builtin:stdlib"
seq_len = 64
[run]
seed = 3
"""
FLAT = {"d_model": 32, "n_layers": 2, "schedule": "cosine:1.5:0.5", "multiple_of": 16, "lr": 0.001,
        "steps": 7, "data": "builtin:stdlib", "seq_len": 64, "seed": 3}


def test_a_config_file_in_sections_is_the_flat_one(tmp_path):
    from tlm_probe.commands.train import build_config
    from tlm_probe.train.config import TrainConfig

    (tmp_path / "c.toml").write_text(SECTIONED)
    (tmp_path / "c.json").write_text(json.dumps(FLAT))
    sectioned = build_config(tmp_path / "c.toml", {"seed": 5})  # a flag overrides its section's value
    assert sectioned == build_config(tmp_path / "c.json", {"seed": 5}) == TrainConfig(**{**FLAT, "seed": 5})
    assert sectioned.to_dict()["lr"] == 0.001 and "optim" not in sectioned.to_dict()  # written flat
    (tmp_path / "bad.toml").write_text("[optim]\nseq_len = 64\nsteps = 1\n")
    with pytest.raises(UserError, match=r"section \[optim\] .* does not hold seq_len \(in \[data\]\)"):
        build_config(tmp_path / "bad.toml", {})


def test_the_sections_hold_every_field_once():
    from dataclasses import fields

    from tlm_probe.train.config import TrainConfig
    from tlm_probe.train.config_sections import SECTIONS

    names = [f.name for cls in SECTIONS.values() for f in fields(cls)]
    assert sorted(names) == sorted(f.name for f in fields(TrainConfig)) and len(names) == len(set(names))


def test_committed_runs_still_load():
    from tlm_probe.train.config import TrainConfig

    files = sorted((ROOT / "analyses" / "results").rglob("train_config.json"))
    assert files
    for path in files:
        saved = json.loads(path.read_text())
        assert {k: v for k, v in TrainConfig.from_dict(saved).to_dict().items() if k in saved} == saved, path


def test_no_function_in_the_command_modules_is_over_50_lines():
    long = []
    for path in sorted((ROOT / "tlm_probe" / "commands").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
                if node.end_lineno - first + 1 > 50:
                    long.append(f"{path.name}:{node.name}")
    assert long == []
