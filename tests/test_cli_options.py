"""One meaning per option across commands (issue 22), checked by introspecting the typer app: -o wherever
there is --out, --device defaults to auto everywhere, probe and eval name their token limit --max-tokens
and their data split --split; the published old names of eval (--ppl-tokens, --ppl-split) still work but
are hidden from --help."""

from __future__ import annotations

import pytest
import torch
from cli_commands import all_commands
from typer.testing import CliRunner

from cli import app
from tlm_probe.commands.common import device_option
from tlm_probe.train.config import TrainConfig


def _option(cmd, name: str):
    return next((p for p in cmd.params if p.param_type_name == "option" and name in p.opts), None)


def test_every_out_option_has_the_short_name():
    with_out = {n: c for n, c in all_commands().items() if _option(c, "--out")}
    assert {"probe", "eval", "train", "compare", "plot", "report", "demo"} <= set(with_out)
    assert [n for n, c in with_out.items() if "-o" not in _option(c, "--out").opts] == []


def test_device_defaults_to_auto_everywhere():
    devices = {n: _option(c, "--device").default for n, c in all_commands().items() if _option(c, "--device")}
    assert {"probe", "eval", "generate", "train", "demo"} <= set(devices)
    # None: the option is generated from TrainConfig and falls back to its default
    assert TrainConfig(steps=1).device == "auto"
    assert {n: d for n, d in devices.items() if d not in ("auto", None)} == {}


def test_probe_and_eval_share_the_token_limit_and_split_names():
    cmds = all_commands()
    for name in ("probe", "eval"):
        assert _option(cmds[name], "--max-tokens").default == 65_536
        assert _option(cmds[name], "--split") is not None
    for old in ("--ppl-tokens", "--ppl-split"):
        assert _option(cmds["eval"], old).hidden  # still accepted (the README once showed them)
    help_text = CliRunner().invoke(app, ["eval", "--help"], terminal_width=200).output
    assert "--max-tokens" in help_text and "--ppl-tokens" not in help_text


def test_an_old_and_a_new_name_that_disagree_are_one_error_line(tmp_path):
    (tmp_path / "model").mkdir()
    r = CliRunner().invoke(app, ["eval", str(tmp_path / "model"), "--ppl-data", "builtin:pydoc",
                                 "--max-tokens", "10", "--ppl-tokens", "20", "--out", str(tmp_path / "ev")])
    assert r.exit_code == 1
    assert r.output.strip() == "error: --ppl-tokens is the old name of --max-tokens: give one of them"
    assert not (tmp_path / "ev").exists()


@pytest.mark.parametrize("given", ["auto", "cpu"])
def test_auto_resolves_to_this_machine(given):
    expected = ("cuda" if torch.cuda.is_available() else "cpu") if given == "auto" else given
    assert device_option(given) == expected
