"""The documentation site (issue 47): every code block is run by a test or says why not; the README is a
landing page whose set-up and test commands are the ones CI runs; the generated reference names every
command and option of the real CLI; and `mkdocs build --strict` succeeds (no broken link, anchor or API
reference). The commands and Python blocks themselves run in test_fresh_process.py and
test_docs_commands.py."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
import typer.main
from docs_blocks import ROOT, RUNNABLE, blocks, page_blocks, pages

README_MAX_LINES = 200
KNOWN_LANGS = (*RUNNABLE, "text", "mermaid")


def _hook():
    spec = importlib.util.spec_from_file_location("docs_hook", ROOT / "docs" / "hooks" / "generated.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_site_page_is_in_the_nav():
    on_disk = {p.relative_to(ROOT) for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk == {p.relative_to(ROOT) for p in pages()[1:]}


def test_no_page_stops_mid_sentence():
    """Moving the README into pages once left a page ending "the checkpoints already on disk are" and the
    next page's text starting "finite and stay.": every page ends a sentence, and no paragraph is a stray
    tail of one (a short line starting in lower case; text after a code block may continue its sentence)."""
    for page in pages():
        text = re.sub(r"```.*?```", "```", page.read_text(), flags=re.S)
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
        last = paragraphs[-1].splitlines()[-1]
        assert re.search(r"[.:)|`>]$|^:::|^!\[", last), f"{page.name} ends mid-sentence: {last[-60:]}"
        tails = [p for p in paragraphs if "\n" not in p and re.match(r"[a-z]", p) and len(p.split()) < 6]
        assert tails == [], page.name


def test_every_code_block_is_run_or_says_why_not():
    bad = [f"{b.page} ({b.section}): ```{b.lang}" for b in blocks() if b.lang not in KNOWN_LANGS]
    assert not bad, f"a block of no known language (bash, python run; text output; mermaid): {bad}"
    marked_output = [b.page for b in blocks() if b.not_run and b.lang not in RUNNABLE]
    assert not marked_output, f"`not run` marks a block that is not code: {marked_output}"
    assert sum(b.not_run is None for b in blocks() if b.lang in RUNNABLE) >= 15


def test_the_readme_is_a_landing_page_whose_commands_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    ci = (ROOT / ".ci" / "run").read_text()
    setup, test = [b.code.strip() for b in page_blocks(ROOT / "README.md") if b.not_run]
    assert setup.startswith("python3 -m venv .venv") and f"\n{setup}\n" in ci
    assert "pytest" in test and "mkdocs build --strict" in test and f"\n{test}\n" in ci
    commands = [ln for b in page_blocks(ROOT / "README.md") if b.lang == "bash" and not b.not_run
                for ln in b.lines() if ln.startswith("tlm ")]
    python = [b for b in page_blocks(ROOT / "README.md") if b.lang == "python"]
    body = [ln for ln in python[0].code.splitlines()  # five lines of Python after the imports
            if ln.strip() and not ln.startswith(("import ", "from "))]
    assert len(commands) == 5 and len(python) == 1 and len(body) == 5


def test_the_site_home_says_what_the_readme_says():
    """The site's home page opened with the README's introduction as it was before study 2 and the mechanism
    on six models ("finds no gain", "appears in no model measured here") while the README had moved on. Its
    introduction is the README's, word for word, with links relative to docs/."""
    readme = (ROOT / "README.md").read_text()
    home = (ROOT / "docs" / "index.md").read_text()
    intro = readme[:readme.index("**Documentation:**")].replace("](docs/", "](")
    assert " ".join(home[:home.index("## Where to go")].split()) == " ".join(intro.split())


def test_the_cli_reference_names_every_command_and_option():
    """Read from the click tree independently of the hook: each command path as a heading, each visible
    parameter's flags, and each default the help shows."""
    page = _hook().cli_reference()
    from cli import app

    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():
        for sub_name, sub in (getattr(cmd, "commands", None) or {None: cmd}).items():
            path = f"tlm {name}" + (f" {sub_name}" if sub_name else "")
            assert f"### `{path}`" in page, path
            section = page.split(f"### `{path}`", 1)[1].split("\n### ", 1)[0]
            for p in sub.params:
                if getattr(p, "hidden", False):
                    assert f"`{p.opts[0]} " not in section
                    continue
                flag = p.opts[0] if p.param_type_name == "option" else p.name
                usages = [ln.split("`")[1].lower().replace(",", " ").replace(".", " ").split()
                          for ln in section.splitlines() if ln.startswith("- `")]
                assert any(flag.lower() in u for u in usages), (path, p.name)


def test_the_glossary_has_every_alignment_statistic_with_its_range():
    from tlm_probe.statistic_names import FORMULAS

    table = _hook().alignment_statistics()
    for name, (kind, _, _) in FORMULAS.items():
        row = next(r for r in table.splitlines() if r.startswith(f"| `{name}` |"))
        assert {"cos": "[−1, 1]", "|cos|": "[0, 1]", "1-cos": "[0, 2]", "ratio": "[0, ∞)"}[kind] in row


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs not installed (the dev extra)")
def test_the_site_builds_strictly(tmp_path):
    """About 12 s of CPU, 4 s of them the notebook pages (20 s wall on a busy 2-core machine); .ci/run
    builds it again after the tests."""
    site = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert res.returncode == 0, res.stderr[-4000:]
    for page in ("index.html", "reference/cli/index.html", "concepts/statistics/index.html",
                 "reference/python-api/index.html"):
        assert (site / page).is_file(), page
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "tlm probe" in cli and "--max-tokens" in cli and "generated:" not in cli
    api = (site / "reference" / "python-api" / "index.html").read_text()
    assert "ProbeOptions" in api and "make_schedule" in api
    assert (site / "figures" / "schedules.png").is_file()  # the repository's figures are served
    for notebook in sorted((ROOT / "analyses").glob("*.ipynb")):  # each a page, with its outputs
        page = (site / "notebooks" / notebook.stem / "index.html").read_text()
        assert "jp-OutputArea-output" in page and "jp-RenderedImage" in page, notebook.name


def test_every_notebook_is_a_page_of_the_site():
    """The analyses/ notebooks, executed (docs/notebooks/, tests/test_notebooks.py), are in the nav."""
    nav = set(re.findall(r"notebooks/[\w-]+\.ipynb", (ROOT / "mkdocs.yml").read_text()))
    assert nav == {f"notebooks/{p.name}" for p in (ROOT / "analyses").glob("*.ipynb")}
