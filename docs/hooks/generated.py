"""MkDocs hook: the pages' generated parts, made at build time from the code that declares them, so the
site cannot fall behind the code.

- `<!-- generated: cli-reference -->`: every `tlm` command, its help and every argument and option with its
  help, default and range, read from the typer app (whose options come from the options dataclasses).
- `<!-- generated: alignment-statistics -->`: the alignment statistics from statistic_names.FORMULAS, with
  the formula, range and sign convention that follow from each kind of formula.
- `<!-- generated: statistic-sets -->`: the `--stats` sets and what each holds (statistic_names.sets()).
- `<!-- generated: ci-methods -->`: the confidence-interval method of each row family
  (statistic_names.ci_methods(), from the rows: the text provenance.json records).
- on_files: the repository's figures (figures/*.png, analyses/results/**/*.png) are served beside the pages,
  so a page links them as they lie in the repository (docs/ is one folder down: `../figures/x.png`).
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # mkdocs loads this file by path: the checkout's package first
    sys.path.insert(0, str(ROOT))

MARKER = re.compile(r"<!-- generated: (?P<name>[a-z-]+) -->")
IMAGES = ("figures/*.png", "analyses/results/**/*.png")

# kind of formula (statistic_names.FORMULAS) -> (per-token value of a and b, range, what the sign says)
KINDS = {
    "cos": ("cos(a, b)", "[−1, 1]", "> 0: a points along b; < 0: a points against it; 0: orthogonal"),
    "|cos|": ("\\|cos(a, b)\\|", "[0, 1]", "no sign: writing against b counts as much as writing along it"),
    "1-cos": ("1 − cos(a, b)", "[0, 2]", "0: b has a's direction (the sublayer or block turned nothing)"),
    "ratio": ("‖a‖ / ‖b‖", "[0, ∞)", "no sign; 1: equal norms"),
}


def _text(s: str) -> str:
    """Help text as Markdown text, as --help shows it (typer reads help as rich markup: `\\[a]` is "[a]"):
    no HTML tags, no emphasis from `*`, no quote mark made of the empty choice `''`."""
    from rich.text import Text

    text = html.escape(Text.from_markup(s).plain, quote=False).replace("*", "\\*")
    return text.replace("''", "`''`")  # the empty choice (`--preset`), not a typographic quote


def _command_section(path: str, cmd, ctx) -> list[str]:
    out = [f"### `{path}`", "", _text(cmd.help or "").strip(), ""]
    if cmd.epilog:
        out += [_text(cmd.epilog), ""]
    params = [p for p in cmd.params if not getattr(p, "hidden", False)]
    for p in params:
        record = p.get_help_record(ctx) if hasattr(p, "get_help_record") else None
        usage, help_text = record if record else (p.human_readable_name, "")
        kind = "argument" if p.param_type_name == "argument" else "option"
        out.append(f"- `{usage}` ({kind}): {_text(help_text)}")
    return [*out, ""]


def cli_reference() -> str:
    """Markdown: `tlm --help`, then every command (and group member) in the order of `tlm --help`."""
    import click
    import typer.main

    from tlm_probe.cli import app

    group = typer.main.get_command(app)
    ctx = click.Context(group, info_name="tlm")
    out = ["## `tlm`", "", _text(group.help or ""), ""]
    for p in group.params:
        usage, help_text = p.get_help_record(ctx)
        out.append(f"- `{usage}`: {_text(help_text)}")
    out += ["", "## Commands", ""]
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        subs = getattr(cmd, "commands", None)
        for sub_name, sub in (sorted(subs.items()) if subs else [(None, cmd)]):
            path = f"tlm {name}" + (f" {sub_name}" if sub_name else "")
            out += _command_section(path, sub, click.Context(sub, info_name=path))
    return "\n".join(out)


def alignment_statistics() -> str:
    from tlm_probe.statistic_names import FORMULAS

    rows = ["| statistic | per-token value (a, b) | range | sign | 95% interval |", "|---|---|---|---|---|"]
    for name, (kind, a, b) in FORMULAS.items():
        value, span, sign = KINDS[kind]
        rows.append(f"| `{name}` | {value.replace('a', f'`{a}`', 1).replace('b', f'`{b}`', 1)} | {span} "
                    f"| {sign} | [over sequences](#confidence-intervals) |")
    return "\n".join(rows)


def statistic_sets() -> str:
    from tlm_probe.statistic_names import sets

    return "\n".join(f"- `{name}` ({len(stats)}): " + ("every statistic of the sets above" if name == "all"
                                                       else ", ".join(f"`{s}`" for s in stats))
                     for name, stats in sets().items())


def ci_methods() -> str:
    from tlm_probe.statistic_names import ci_methods

    rows = ["| rows | 95% interval (`ci_low`, `ci_high`) |", "|---|---|"]
    rows += [f"| {_text(k)} | {_text(v)} |" for k, v in ci_methods().items()]
    return "\n".join(rows)


GENERATORS = {
    "cli-reference": cli_reference,
    "alignment-statistics": alignment_statistics,
    "statistic-sets": statistic_sets,
    "ci-methods": ci_methods,
}


def expand(markdown: str) -> str:
    """Every generated marker of a page replaced by what its generator writes (an unknown name fails)."""
    return MARKER.sub(lambda m: GENERATORS[m["name"]](), markdown)


def on_page_markdown(markdown: str, **_) -> str:
    return expand(markdown)


def on_files(files, config, **_):
    from mkdocs.structure.files import File

    for pattern in IMAGES:
        for path in sorted(ROOT.glob(pattern)):
            rel = path.relative_to(ROOT).as_posix()
            if files.get_file_from_path(rel) is None:
                files.append(File(rel, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files
