"""The code blocks of the documentation (README.md, then the site's pages in mkdocs.yml's nav order), for the
tests that run them: each fenced block with its page, the heading above it, its language and the reason it
is not run (`<!-- not run: REASON -->` on the line before the fence), if any."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(
    r"^(?P<marker><!-- not run: (?P<reason>.+?) -->\n)?```(?P<lang>[a-z]*)\n(?P<code>.*?)^```$", re.M | re.S
)
HEADING = re.compile(r"^#{1,4} (.+)$", re.M)
NAV_PAGE = re.compile(r"^\s*- (?:[^:\n]+: )?(?P<page>[\w/.-]+\.md)$", re.M)
RUNNABLE = ("bash", "python")
"""Languages whose blocks the tests run (or that say why not); `text` is printed output and `mermaid` a
diagram, neither run."""


@dataclass(frozen=True)
class Block:
    page: str
    section: str
    lang: str
    code: str
    not_run: str | None

    def lines(self) -> list[str]:
        """Shell lines with continuations joined."""
        return [line.strip() for line in self.code.replace("\\\n", " ").splitlines()]


def pages() -> list[Path]:
    """README.md, then every page of the site's nav, in order."""
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:", 1)[1]
    return [ROOT / "README.md", *(ROOT / "docs" / m["page"] for m in NAV_PAGE.finditer(nav))]


def page_blocks(path: Path) -> list[Block]:
    text = path.read_text()
    heads = [(m.start(), m[1]) for m in HEADING.finditer(text)]
    out = []
    for m in FENCE.finditer(text):
        section = next((h for at, h in reversed(heads) if at < m.start()), "")
        out.append(Block(str(path.relative_to(ROOT)), section, m["lang"], m["code"], m["reason"]))
    return out


def blocks() -> list[Block]:
    return [b for p in pages() for b in page_blocks(p)]


def run_blocks() -> list[Block]:
    """The bash and python blocks not marked `not run`, in documentation order."""
    return [b for b in blocks() if b.lang in RUNNABLE and b.not_run is None]


def words(line: str) -> list[str]:
    """The command's words, comments and [optional parts] left out."""
    out, depth = [], 0
    for w in shlex.split(line, comments=True):
        depth += w.startswith("[")
        if not depth:
            out.append(w)
        depth -= w.endswith("]")
    return out


def tlm_lines() -> list[str]:
    """Every `tlm` command line of a run block, in documentation order."""
    return [line for b in run_blocks() if b.lang == "bash" for line in b.lines() if line.startswith("tlm ")]
