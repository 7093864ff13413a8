"""Progress where the user looks: a rich bar on a terminal, plain periodic lines in a log, one HTML
`<progress>` line updated in place in a notebook; and third-party tqdm bars kept out of logs.

A step that draws no progress of its own (loading a model, tokenizing a corpus, building a model, a
validation pass) is a Phase: once it has run ANNOUNCE_AFTER_S seconds it says what it is doing, and when it
ends, what it did and how long it took; a quicker one says nothing (a bad input found in it stays one
error line).

rich draws nothing into a pipe until a loop ends (a log stays empty for the whole run), and in Jupyter it
wants ipywidgets (a warning per run without them). A log gets nanoGPT's habit instead: one line at the
start, then one every EVERY_S seconds or every tenth of the work, and a last line with the whole loop's
rate. A notebook gets an IPython display handle that is updated in place (no widgets needed).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator

EVERY_S = 10.0  # in a log, a line at least this often...
LINES = 10  # ...and at every tenth of the work, whichever comes first
NOTEBOOK_EVERY_S = 0.5  # a notebook redraws its one line at most this often
# third-party progress bars (transformers' GGUF dequantising, datasets' map, lm-eval's tokenizing) read
# these when they are first imported
QUIET_ENV = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
ANNOUNCE_AFTER_S = 2.0
"""A Phase still running after this many seconds says what it is doing. The environment variable
TLM_ANNOUNCE_AFTER_S replaces it (0: every phase says so as it starts)."""


FIRST_LINE_S = 1.0
"""A heavy command says what it is doing within this many seconds of its start on an idle machine (issue
47): importing torch and transformers alone takes seconds (importing_libraries; tests/test_first_line.py)."""


def importing_libraries(enabled: bool = True) -> Phase:
    """The Phase of a heavy command's library imports (torch, transformers), the one way every heavy
    command keeps FIRST_LINE_S: each enters it after its argument checks, around its first import of
    torch. Announced at once (or after TLM_ANNOUNCE_AFTER_S where that is set), not from a timer: an
    extension module holds the interpreter lock while it loads, so a timer thread could speak only after
    it. Says nothing where torch is imported already (a second command in one process, a test) and on
    every torchrun rank but 0."""
    after = announce_after_s() if "TLM_ANNOUNCE_AFTER_S" in os.environ else 0.0
    quiet = "torch" in sys.modules or os.environ.get("RANK", "0") != "0"
    return Phase("importing torch and transformers", enabled=enabled and not quiet, after_s=after)


def since_start() -> float:
    """Seconds since tlm_probe was first imported: a command's whole time, its imports included."""
    import tlm_probe

    return time.perf_counter() - tlm_probe.STARTED


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


@contextlib.contextmanager
def no_tqdm_bars() -> Iterator[None]:
    """No tqdm bar drawn in the block, also where tqdm was imported before TQDM_DISABLE was set (tqdm reads
    it once, at import): the default of tqdm's `disable` is switched for the block. A caller that passes
    disable=False itself still draws (lm-eval's "Tokenizing inputs"; eval/harness.py asks it not to)."""
    before = os.environ.get("TQDM_DISABLE")
    os.environ["TQDM_DISABLE"] = "1"
    std = sys.modules.get("tqdm.std")
    init = std.tqdm.__dict__["__init__"] if std is not None else None
    if std is not None:
        std.tqdm.__init__ = functools.partialmethod(init, disable=True)
    try:
        yield
    finally:
        if std is not None:
            std.tqdm.__init__ = init
        if before is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = before


def say(text: str) -> None:
    """One line on stderr, now (a pipe is block-buffered: flushed)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def announce_after_s() -> float:
    """ANNOUNCE_AFTER_S, or the TLM_ANNOUNCE_AFTER_S environment variable's seconds."""
    try:
        return max(float(os.environ.get("TLM_ANNOUNCE_AFTER_S", ANNOUNCE_AFTER_S)), 0.0)
    except ValueError:
        return ANNOUNCE_AFTER_S


class Phase:
    """`with Phase("loading gpt2") as phase: ...; phase.result = "loaded gpt2 (gpt2, 12 layers)"`.

    A step with no progress of its own: if it is still running after `after_s` seconds (default
    announce_after_s()) a line "loading gpt2 ..." says what it is doing (from a timer thread: the step
    need not cooperate), and when it ends, "loaded gpt2 (gpt2, 12 layers) in 7.3 s" (`result`, else
    "<what>: done"). A quicker step says nothing, and one that fails says nothing more (its error is its
    own line). The same in a terminal, a log and a notebook: these are lines, not a bar."""

    def __init__(self, what: str, *, enabled: bool = True, after_s: float | None = None):
        self.what, self.enabled = what, enabled
        self.after_s = announce_after_s() if after_s is None else after_s
        self.result: str | None = None
        self.announced = False
        self.t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._ended = False
        self._timer: threading.Timer | None = None

    def __enter__(self) -> Phase:
        self.t0 = time.perf_counter()
        if not self.enabled:
            return self
        if self.after_s <= 0:
            self._announce()
        else:
            self._timer = threading.Timer(self.after_s, self._announce)
            self._timer.daemon = True  # never keeps a process alive
            self._timer.start()
        return self

    def _announce(self) -> None:
        with self._lock:
            if not self._ended:
                self.announced = True
                say(f"{self.what} ...")

    def __exit__(self, exc_type, *exc) -> None:
        with self._lock:
            self._ended = True
            if self._timer is not None:
                self._timer.cancel()
        if self.announced and exc_type is None:
            say(f"{self.result or f'{self.what}: done'} in {time.perf_counter() - self.t0:.1f} s")


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
