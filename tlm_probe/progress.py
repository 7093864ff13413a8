"""Progress where the user looks: a rich bar on a terminal, plain periodic lines in a log, one HTML
`<progress>` line updated in place in a notebook; and third-party tqdm bars kept out of logs.

rich draws nothing into a pipe until a loop ends (a log stays empty for the whole run), and in Jupyter it
wants ipywidgets (a warning per run without them). A log gets nanoGPT's habit instead: one line at the
start, then one every EVERY_S seconds or every tenth of the work, and a last line with the whole loop's
rate. A notebook gets an IPython display handle that is updated in place (no widgets needed).
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterable, Iterator

EVERY_S = 10.0  # in a log, a line at least this often...
LINES = 10  # ...and at every tenth of the work, whichever comes first
NOTEBOOK_EVERY_S = 0.5  # a notebook redraws its one line at most this often
# third-party progress bars (transformers' GGUF dequantising, datasets' map, lm-eval's tokenizing) read
# these when they are first imported
QUIET_ENV = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def where() -> str:
    """'notebook', 'terminal' or 'log' (stderr redirected to a file or a pipe)."""
    from rich.console import Console

    console = Console(stderr=True)
    if console.is_jupyter:
        return "notebook"
    return "terminal" if console.is_terminal else "log"


def quiet_third_party_bars() -> None:
    """Silence tqdm bars of other libraries (carriage-return spam in a log). The variables reach the
    libraries not imported yet; the ones already imported are switched off through their own API."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    switches = {
        "transformers": lambda m: m.utils.logging.disable_progress_bar(),
        "datasets": lambda m: m.disable_progress_bars(),
        "huggingface_hub": lambda m: m.utils.disable_progress_bars(),
    }
    for name, switch in switches.items():
        if name in sys.modules:
            switch(sys.modules[name])


class Ticker:
    """`with Ticker("probing", total, "tokens") as t: ... t.advance(n)`: a bar, lines or a notebook line
    by `where()`; `enabled=False` shows nothing. `total` may be None (count only, no eta). In a log the
    first advance prints at once (or the start, with `announce`, for a phase that never advances)."""

    def __init__(self, description: str, total: float | None, unit: str = "", *, enabled: bool = True,
                 mode: str | None = None, announce: bool = False):
        self.description, self.total, self.unit, self.announce = description, total, unit, announce
        self.mode = (mode or where()) if enabled else "off"
        self.done = 0.0
        self.note = ""  # extra words for the status (a training loop's loss and rate)
        self.t0 = self.t_line = time.perf_counter()
        self.done_line: float | None = None
        self.every = max(math.ceil(total / LINES), 1) if total else math.inf
        self._bar = self._task = self._handle = None

    def __enter__(self) -> Ticker:
        self.t0 = self.t_line = time.perf_counter()
        if self.mode == "terminal":
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            columns = (BarColumn(), MofNCompleteColumn(), self.unit, TimeRemainingColumn())
            self._bar = Progress("[progress.description]{task.description}", *columns, transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.description, total=self.total)
        elif self.mode == "log" and self.announce:  # else the first advance is the first line: a bad
            self._line(f"{self.description}: started")  # input found in the first batch stays one line
        elif self.mode == "notebook":
            from IPython.display import HTML, display

            self._handle = display(HTML(self._html()), display_id=True)
        return self

    def advance(self, n: float = 1) -> None:
        self.done += n
        now = time.perf_counter()
        if self.mode == "terminal":
            self._bar.update(self._task, advance=n)
        elif self.mode == "log" and self._due(now):
            self._line(self._status(now))
            self.t_line, self.done_line = now, self.done
        elif self.mode == "notebook" and now - self.t_line >= NOTEBOOK_EVERY_S:
            self._notebook(now)

    def __exit__(self, *exc) -> None:
        now = time.perf_counter()
        if self.mode == "terminal":
            self._bar.__exit__(*exc)
        elif self.mode == "log" and exc[0] is None:  # an error says what happened in its own line
            took = now - self.t0
            rate = f", {self.done / took:,.0f} {self.unit}/s" if took > 0 and self.done else ""
            what = f"{self._count()} in" if self.done or self.total else "done in"
            self._line(f"{self.description}: {what} {took:.0f}s{rate}")
        elif self.mode == "notebook":
            self._notebook(now)

    def _due(self, now: float) -> bool:
        if self.total and self.done >= self.total:
            return False  # the last step: __exit__ prints it with the whole loop's rate
        last = self.done_line or 0.0
        return self.done_line is None or now - self.t_line >= EVERY_S or self.done - last >= self.every

    def _count(self) -> str:
        total = f"/{self.total:,.0f}" if self.total else ""
        return f"{self.done:,.0f}{total} {self.unit}".rstrip()

    def _status(self, now: float) -> str:
        took = now - self.t0
        text = f"{self.description}: {self._count()}" + (f", {self.note}" if self.note else "")
        if took > 0 and self.done and not self.note:
            text += f", {self.done / took:,.0f} {self.unit}/s".replace(" /s", "/s")
            if self.total:
                text += f", eta {(self.total - self.done) * took / self.done:.0f}s"
        return text

    def _html(self) -> str:
        import html

        bar = f'<progress value="{self.done:.0f}" max="{self.total:.0f}"></progress> ' if self.total else ""
        return f"{bar}<code>{html.escape(self._status(time.perf_counter()))}</code>"

    def _notebook(self, now: float) -> None:
        from IPython.display import HTML

        self._handle.update(HTML(self._html()))
        self.t_line = now

    @staticmethod
    def _line(text: str) -> None:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()  # a pipe is block-buffered: the line is for now, not for the loop's end


class NotebookProgress:
    """rich.progress.Progress's add_task / update (fields such as loss=, tps=) drawn as a Ticker's notebook
    line: the training loop keeps one progress API and a notebook gets a bar without ipywidgets."""

    def __init__(self, enabled: bool = True, unit: str = "steps"):
        self.enabled, self.unit = enabled, unit
        self.ticker: Ticker | None = None
        self.fields: dict = {}

    def __enter__(self) -> NotebookProgress:
        return self

    def __exit__(self, *exc) -> None:
        if self.ticker is not None:
            self.ticker.__exit__(*exc)

    def add_task(self, description: str, total: float | None = None, completed: float = 0, **fields) -> int:
        self.ticker = Ticker(description, total, self.unit, enabled=self.enabled, mode="notebook").__enter__()
        self.fields = dict(fields)
        self.ticker.done = completed
        return 0

    def update(self, task: int, completed: float | None = None, **fields) -> None:
        self.fields.update(fields)
        shown = {k: v for k, v in self.fields.items() if v != "-"}
        self.ticker.note = ", ".join(f"{v} tok/s" if k == "tps" else f"{k} {v}" for k, v in shown.items())
        if completed is not None:
            self.ticker.advance(completed - self.ticker.done)


def tick(iterable: Iterable, description: str, *, enabled: bool = True, unit: str = "batches") -> Iterator:
    """Iterate with a Ticker (total = len(iterable) when it has one)."""
    total = len(iterable) if hasattr(iterable, "__len__") else None
    with Ticker(description, total, unit, enabled=enabled) as t:
        for item in iterable:
            yield item
            t.advance(1)
