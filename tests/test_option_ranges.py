"""Every numeric option of every command has a stated range (tlm_probe/ranges.py, issue 36), the same for the
same concept in every command, shown in --help, and a value outside it is refused while the command line is
parsed: one `error:` line naming the option, the range and the value, exit 1, nothing written, no work."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from cli import app
from tlm_probe.commands.options import plain_type
from tlm_probe.generation import MAX_NEW_TOKENS
from tlm_probe.ranges import RANGES
from tlm_probe.schedules.options import MAX_LAYERS, MAX_WIDTH
from tlm_probe.seeds import SEED_MAX

ROOT = Path(__file__).resolve().parents[1]
STATED = re.compile(r"\[(-?[\d.e+]+)<=x<=(-?[\d.e+]+)\]")


def _commands() -> dict[str, object]:
    out = {}
    for name, cmd in typer.main.get_group(app).commands.items():
        for sub, leaf in (getattr(cmd, "commands", None) or {"": cmd}).items():
            out[f"{name} {sub}".strip()] = leaf
    return out


def _numeric(cmd) -> list:
    return [p for p in cmd.params if p.param_type_name == "option"
            and plain_type(p.type_descriptor.annotation) in (int, float)]


NUMERIC = [(name, p) for name, cmd in sorted(_commands().items()) for p in _numeric(cmd)]


def test_every_numeric_option_states_a_range():
    missing = [f"{name} {p.opts[0]}" for name, p in NUMERIC if not STATED.search(p.help or "")]
    assert not missing, f"numeric options without a range (add the concept to tlm_probe/ranges.py): {missing}"
    assert len(NUMERIC) > 100  # every command's numbers, not a few


def test_one_concept_one_range_everywhere():
    stated: dict[str, set] = {}
    for _, p in NUMERIC:
        stated.setdefault(p.name, set()).add(STATED.search(p.help).group(0))
    assert {n: s for n, s in stated.items() if len(s) > 1} == {}
    assert RANGES["seed"].low == 0 and RANGES["seed"].high == SEED_MAX  # seeds.py: what NumPy takes
    assert RANGES["max_new_tokens"].high == MAX_NEW_TOKENS  # generation.py's own check agrees
    assert RANGES["n_layers"].high == MAX_LAYERS  # schedules/options.py's own checks agree
    assert RANGES["d_ff"].high == RANGES["d_model"].high == MAX_WIDTH


def test_the_help_shows_the_range():
    text = CliRunner().invoke(app, ["generate", "--help"], env={"COLUMNS": "300"}).output
    assert f"[1<=x<={MAX_NEW_TOKENS}]" in text and f"[0<=x<={SEED_MAX}]" in text


def _outside(p) -> str:
    low, high = map(float, STATED.search(p.help).groups())
    kind = plain_type(p.type_descriptor.annotation)
    if kind is float:
        return "nan" if p.name == "lr" else str(high * 2 + 1)  # nan is in no range
    return str(int(low) - 1) if p.name in ("seed", "threads") else str(int(high) + 1)


def _positionals(cmd) -> list[str]:
    return ["x" for p in cmd.params if p.param_type_name == "argument"]


@pytest.mark.parametrize(("command", "param"), NUMERIC, ids=[f"{n} {p.opts[0]}" for n, p in NUMERIC])
def test_out_of_range_is_refused_before_any_work(tmp_path, monkeypatch, command, param):
    monkeypatch.chdir(tmp_path)
    cmd = _commands()[command]
    value = _outside(param)
    res = CliRunner().invoke(app, [*command.split(), *_positionals(cmd), param.opts[0], value])
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert res.exit_code == 1 and len(errors) == 1, res.output
    assert f"{param.opts[0]} must be" in errors[0] and f"got {value}" in errors[0], errors
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


@pytest.mark.parametrize("argv", [
    ["generate", "MODEL", "--max-new-tokens", str(10**18)],  # ran until killed, printing nothing
    ["generate", "MODEL", "--seed", "-1"],  # was accepted by generate alone
    ["schedule", "--layers", "1000000", "--component", "heads"],  # did not end in 120 s
], ids=["max-new-tokens 10**18", "seed -1", "schedule layers 10**6"])
def test_issue_36_cases_are_refused_at_once_in_a_fresh_process(tmp_path, argv):
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "tlm_probe", *argv], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), res.stderr[-2000:]
    flag = next(a for a in argv if a in ("--max-new-tokens", "--seed", "--layers"))
    assert lines[0].startswith(f"error: {flag} must be an integer in [")
    assert time.perf_counter() - start < 60 and list(tmp_path.iterdir()) == []


# the same ranges where no parser runs: a library call and a --config file (before: 10**18 new tokens, a
# negative seed and an lr of 1e6 were taken from a library call or a YAML file)
LIBRARY = [
    ("tlm_probe.probe.options", "ProbeOptions", {}, "max_tokens", 2**60),
    ("tlm_probe.generation", "GenerateOptions", {}, "max_new_tokens", 10**18),
    ("tlm_probe.generation", "GenerateOptions", {}, "seed", -1),
    ("tlm_probe.train.config", "TrainConfig", {"steps": 2}, "lr", 1e6),
    ("tlm_probe.train.config", "TrainConfig", {"steps": 2}, "batch_size", 10**8),
    ("tlm_probe.eval.run", "EvalOptions", {}, "limit", 10**12),
    ("tlm_probe.schedules.options", "ScheduleOptions", {}, "multiple_of", 2**30),
    ("tlm_probe.schedules.options", "FromProbeOptions", {}, "power", 1e9),
    ("tlm_probe.importance.options", "ImportanceOptions", {}, "seed", -1),
]


@pytest.mark.parametrize("module, cls, kw, name, bad", LIBRARY, ids=[f"{c}.{n}" for _, c, _, n, _ in LIBRARY])
def test_a_library_call_meets_the_same_range(module, cls, kw, name, bad):
    import importlib

    from tlm_probe.errors import UserError

    options = getattr(importlib.import_module(module), cls)
    stated = RANGES[name]
    with pytest.raises(UserError, match=rf"^{name} must be an? \w+ in \[{stated.low}, {stated.high}\], got "):
        options(**kw, **{name: bad})
    options(**kw, **{name: stated.high})  # the bound itself is in range


def test_a_config_file_meets_the_same_range(tmp_path):
    (tmp_path / "run.yaml").write_text("lr: 1000000.0\nsteps: 2\n")
    r = CliRunner().invoke(app, ["train", "--config", str(tmp_path / "run.yaml"), "--data", "builtin:pydoc",
                                 "--out", str(tmp_path / "out")])
    lines = r.output.strip().splitlines()
    want = "error: lr must be a number in [0.0, 10.0], got 1000000.0"
    assert r.exit_code == 1 and lines == [want], r.output
    assert not (tmp_path / "out").exists()


def _range_checked_classes() -> list[type]:
    """Every options dataclass that checks itself with ranges.check_values (found by its source)."""
    import dataclasses
    import importlib
    import inspect

    out = []
    for path in sorted((ROOT / "tlm_probe").rglob("*.py")):
        if "check_values(self)" not in path.read_text():
            continue
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for _, cls in inspect.getmembers(module, dataclasses.is_dataclass):
            post = getattr(cls, "__post_init__", None)
            if cls.__module__ == module.__name__ and post and "check_values(self)" in inspect.getsource(post):
                out.append(cls)
    return out


CHECKED = _range_checked_classes()
BASES = {"TrainConfig": {"steps": 10}, "TrustOptions": {"data": ("a.txt", "b.txt")}}
"""What a class needs beside the field under test to be built at all."""


@pytest.mark.parametrize("cls", CHECKED, ids=[c.__name__ for c in CHECKED])
def test_a_fraction_is_no_count_and_numpys_integers_are(cls):
    """A library call or a --config file: 2.5 (or 2.0) where a count belongs is refused naming the field
    (it was taken, and failed later or truncated); NumPy's integers are counts."""
    import dataclasses

    import numpy as np

    from tlm_probe.errors import UserError
    from tlm_probe.ranges import range_of

    base = BASES.get(cls.__name__, {})
    counts = [f for f in dataclasses.fields(cls)
              if (stated := range_of(f.name, f.metadata)) is not None and stated.integer]
    assert counts, cls
    for f in counts:
        low = range_of(f.name, f.metadata).low
        with pytest.raises(UserError, match=rf"^{f.name} must be an integer in \["):
            cls(**{**base, f.name: float(max(low, 1)) + 0.5})
        value = base.get(f.name, f.default)
        if isinstance(value, int) and not isinstance(value, bool):
            taken = getattr(cls(**{**base, f.name: np.int64(value)}), f.name)
            assert taken == value and type(taken) is int  # json.dumps writes it into provenance
