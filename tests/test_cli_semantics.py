"""One meaning per option, one style of help (issue 22), checked by introspecting the typer app of
`cli.app`: --overwrite says the same thing on every command that has it plus when that command needs
it; the Python API takes the CLI's names; defaults are shown one way; compare and sweep say what each
is for."""

from __future__ import annotations

import typer

from cli import app


def _commands() -> dict:
    """name -> click command (typer vendors its own click: duck-typed, not isinstance)."""
    out = {}
    for name, cmd in typer.main.get_command(app).commands.items():
        subs = getattr(cmd, "commands", None)
        out |= {f"{name} {k}": c for k, c in subs.items()} if subs else {name: cmd}
    return out


def _option(cmd, name: str):
    return next((p for p in cmd.params if p.param_type_name == "option" and name in p.opts), None)


# ---- --overwrite -----------------------------------------------------------------------------------
# when a rerun into the folder of an earlier run of the same command needs --overwrite (the behaviour,
# written down here independently of the help table: train/data/export refuse, the others refresh)
RERUN_NEEDS_IT = {"train": True, "data prepare": True, "export": True,
                  "probe": False, "report": False, "compare": False, "demo": False, "sweep": False}
KIND = {"sweep": "compare"}  # a sweep's folder is a comparison (its manifest's kind, ownership.LEGACY_KIND)


def test_overwrite_says_one_meaning_and_when_each_command_needs_it():
    helps = {n: _option(c, "--overwrite").help for n, c in _commands().items() if _option(c, "--overwrite")}
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
    from typer.testing import CliRunner

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
