"""One meaning per option, one style of help (issue 22), checked by introspecting the typer app of
`cli.app`: --overwrite says the same thing on every command that has it plus when that command needs
it; the Python API takes the CLI's names; defaults are shown one way; compare and sweep say what each
is for."""

from __future__ import annotations

import re

import typer
from cli_commands import all_commands
from typer.testing import CliRunner

from cli import app


def _option(cmd, name: str):
    return next((p for p in cmd.params if p.param_type_name == "option" and name in p.opts), None)


# ---- --overwrite -----------------------------------------------------------------------------------
# when a rerun into the folder of an earlier run of the same command needs --overwrite (the behaviour,
# written down here independently of the help table: train/data/export/convert refuse, the others refresh)
RERUN_NEEDS_IT = {"train": True, "data prepare": True, "export": True, "convert llama2c": True,
                  "probe": False, "diff": False, "trust": False, "report": False, "compare": False,
                  "demo": False, "sweep": False}
KIND = {"sweep": "compare"}  # a sweep's folder is a comparison (its manifest's kind, ownership.LEGACY_KIND)


def test_overwrite_says_one_meaning_and_when_each_command_needs_it():
    helps = {n: _option(c, "--overwrite").help for n, c in all_commands().items()
             if _option(c, "--overwrite")}
    assert set(helps) == set(RERUN_NEEDS_IT)
    for name, text in helps.items():
        kind = KIND.get(name, name)
        assert text.startswith(f"--overwrite replaces only what an earlier `tlm {kind}` wrote in --out, "
                               "and writes beside files tlm did not write, never onto them."), name
        assert text.count("Needed") + text.count("Not needed") == 1, name
        assert ("Not needed" not in text) == RERUN_NEEDS_IT[name], name


def test_data_prepare_behaves_as_its_overwrite_help_says(tmp_path):
    """The behaviour behind one row of RERUN_NEEDS_IT (data prepare: True), run for real: a second
    prepare into the same folder is refused without --overwrite and goes through with it, and a file
    tlm did not write in that folder survives."""

    text = "\n\n".join(f"paragraph {i}: the tapered model reads word {i * 7 % 13} twice" for i in range(200))
    (tmp_path / "c.txt").write_text(text)
    out = tmp_path / "d"
    args = ["data", "prepare", str(tmp_path / "c.txt"), "--out", str(out)]
    runner = CliRunner()
    assert runner.invoke(app, args).exit_code == 0
    (out / "mine.txt").write_text("keep")
    again = runner.invoke(app, args)
    assert again.exit_code == 1 and "pass --overwrite" in again.output
    assert runner.invoke(app, [*args, "--overwrite"]).exit_code == 0
    assert (out / "mine.txt").read_text() == "keep" and (out / "meta.json").is_file()


# ---- the Python API takes the CLI's names -----------------------------------------------------------
def _pickle_checkpoint(folder):
    """A tlm checkpoint whose weights are only a pickle (pytorch_model.bin): what --unsafe-pickle is for."""
    import torch

    from tlm_probe.models.config import TLMConfig
    from tlm_probe.models.io import save_tlm
    from tlm_probe.models.tlm import TaperedLM

    torch.manual_seed(0)
    model = TaperedLM(TLMConfig(d_ff=(48, 16), vocab_size=64, d_model=16, n_layers=2, n_heads=2,
                                max_seq_len=32))
    save_tlm(model, folder)
    (folder / "model.safetensors").unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    return model


def test_probe_api_has_the_cli_names_unsafe_pickle_and_threads():
    import inspect

    from tlm_probe.api.library import probe

    params = inspect.signature(probe).parameters
    cli_names = {p.name for p in all_commands()["probe"].params}
    for name in ("unsafe_pickle", "threads"):
        assert name in params and name in cli_names  # one name in the API and on the command line
    assert "allow_pickle" not in params


def test_probe_threads_and_unsafe_pickle_work_and_the_old_keyword_warns(tmp_path):
    import numpy as np
    import pytest
    import torch

    from tlm_probe.api.library import probe
    from tlm_probe.errors import UserError
    from tlm_probe.models.io import load_tlm

    model = _pickle_checkpoint(tmp_path / "ck")
    ids = np.random.default_rng(0).integers(0, 64, size=(2, 16))
    before = 2 if torch.get_num_threads() == 1 else torch.get_num_threads()
    torch.set_num_threads(before)
    with pytest.raises(UserError, match="refusing to unpickle|pickle"):
        probe(tmp_path / "ck", ids)  # refused without the flag, as `tlm probe` without --unsafe-pickle
    df = probe(tmp_path / "ck", ids, unsafe_pickle=True, threads=1)
    assert df.attrs["provenance"]["threads"] == 1  # set for the run (recorded inside it) ...
    assert torch.get_num_threads() == before  # ... and restored after, as `tlm probe --threads 1`
    with pytest.raises(UserError, match="threads must be an integer >= 0"):
        probe(tmp_path / "ck", ids, unsafe_pickle=True, threads=-1)
    with pytest.warns(DeprecationWarning, match="use unsafe_pickle="):
        old = probe(tmp_path / "ck", ids, allow_pickle=True, threads=1)
    assert old["value"].tolist() == df["value"].tolist()  # the same run (one thread, same order of sums)
    with pytest.raises(TypeError, match="old name of unsafe_pickle"):
        probe(tmp_path / "ck", ids, allow_pickle=True, unsafe_pickle=True)
    with pytest.warns(DeprecationWarning):
        loaded = load_tlm(tmp_path / "ck", allow_pickle=True)
    for name, t in model.state_dict().items():  # the pickle read back is the model that was saved
        assert torch.equal(loaded.state_dict()[name], t), name


# ---- one style of help ------------------------------------------------------------------------------
def _helps():
    for name, cmd in all_commands().items():
        for p in cmd.params:
            yield name, p


def test_the_command_list_is_one_short_line_each():
    """`tlm --help` lists each command by the first paragraph of its description. typer's rich mode keeps
    that paragraph's source line breaks (the list came out ragged) and a paragraph-long first paragraph
    buried the list; each entry is now one line of at most 100 characters, and a flag shows no <bool>."""
    for argv in ([], ["data"], ["convert"]):
        text = CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": "200"}).output
        rows = re.findall(r"^│ (.+?) *│$", text.split("Commands")[1], flags=re.M)
        assert rows and all(re.match(r"\S+ +\S", row) and len(row) <= 110 for row in rows), rows
        assert "<bool>" not in text
    for name, cmd in all_commands().items():
        assert "\n" not in cmd.short_help and len(cmd.short_help) <= 100, name


def test_defaults_are_shown_one_way_by_typer_not_in_the_help_words():

    words = re.compile(r"\(default\b|; default\b")
    stated = [(n, p.opts[0], p.help) for n, p in _helps() if words.search(p.help or "")]
    assert stated == []
    cmds = all_commands()
    # what used to be words in the help is typer's "[default: X]" now, the value itself where it can be
    assert _option(cmds["train"], "--d-model").default == 128
    assert _option(cmds["train"], "--mem-chunk").show_default == "16"
    assert _option(cmds["demo"], "--steps").show_default == "300; 20 with --quick"
    text = CliRunner().invoke(app, ["schedule", "--help"], terminal_width=200).output
    assert "[default: (24;" in text and "(default 24)" not in text
    assert _option(cmds["schedule"], "--layers").show_default == "24; with --from-probe the probe's"


def test_a_flag_left_at_its_shown_default_is_left_to_the_config_file(tmp_path):
    """--d-model now carries 128 as its typer default (shown in --help); a config file's d_model must still
    win when the flag is not given, and the flag when it is: only the command line counts as given."""
    import json

    from tlm_probe.commands.options import with_config_options
    from tlm_probe.train.config import TrainConfig

    seen = {}

    @with_config_options(TrainConfig, ("d_model", "steps"), {"d_model": {"default": 128}})
    def cmd(*, config_flags: dict):
        seen.update(config_flags)

    mini = typer.Typer()
    mini.command()(cmd)
    mini.command("other")(lambda: None)
    assert CliRunner().invoke(mini, ["cmd"]).exit_code == 0 and seen == {}
    assert CliRunner().invoke(mini, ["cmd", "--d-model", "128", "--steps", "7"]).exit_code == 0
    assert json.dumps(seen, sort_keys=True) == '{"d_model": 128, "steps": 7}'


def test_flags_show_no_value_type():
    for name in all_commands():
        text = CliRunner().invoke(app, [*name.split(), "--help"], terminal_width=200).output
        assert "<bool>" not in text, name
    probe = all_commands()["probe"]
    flags = [p for p in probe.get_params(typer.Context(probe)) if getattr(p, "is_flag", False)]
    assert all(p.metavar == "" for p in flags)


def test_compare_and_sweep_say_what_each_is_for():
    cmds = all_commands()
    compare, sweep = cmds["compare"].help, cmds["sweep"].help
    assert compare != sweep
    assert compare.startswith("Compare a few chosen") and sweep.startswith("Search a grid")
    assert "sweep_heatmap.png" in sweep and "--shapes" in sweep
