"""The importance pass's expected cost, said before it runs (`tlm probe --stats importance|all`).

The count is suite.expected_passes: the PassCounter that provenance's info["passes"] comes from, fed the
forwards each pass plans (no second formula). It is said in forward-equivalents of the pass's sequences
(a backward counted as BACKWARD_FORWARDS forwards) and as a multiple of the default probe, one forward of
every probed sequence. Once the pass's first batch has run, its time per counted forward-equivalent gives
an estimate of the whole pass's time.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

BACKWARD_FORWARDS = 2.0
"""A backward's cost in forwards: the gradients of the activations and of the weights, each a forward's
matmuls (the usual 2x; the gradient pass asks for the MLP weights' gradients only, so it is at most this)."""


def stderr_line(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()  # a pipe is block-buffered: the line is for now


def work(passes: dict) -> float:
    """Forward-equivalents of a PassCounter summary."""
    return sum(p["forwards"] + BACKWARD_FORWARDS * p["backwards"] for p in passes.values())


def _parts(passes: dict) -> str:
    def part(name, p):
        back = f" + {p['backwards']} backward" if p["backwards"] else ""
        return f"{name} {p['forwards']}{back}"  # as provenance rounds them (PassCounter.summary)

    return ", ".join(part(name, p) for name, p in passes.items())


_END = object()


class CostNotice:
    """Says the expected cost (before) and, after the first batch, the estimated time (timed)."""

    def __init__(self, probed_rows: int, say: Callable[[str], None] = stderr_line):
        """probed_rows: the sequences the default probe forwards once (this rank's stream)."""
        self.probed_rows, self.say = probed_rows, say
        self.expected = 0.0
        self.lines: list[str] = []

    def _say(self, text: str) -> None:
        self.lines.append(text)
        self.say(text)

    def before(self, passes: dict, if_refused: dict, rows: int) -> None:
        """passes / if_refused: suite.expected_passes with the restart usable / refused; rows: the pass's
        sequences."""
        self.expected = work(passes)
        if not passes:  # the asked statistics read only the weights (stable rank)
            self._say("importance pass: no forwards (the asked statistics read only the weights)")
            return
        times = self.expected * rows / max(self.probed_rows, 1)
        refused = work(if_refused)
        text = (
            f"importance pass: expected {self.expected:.4g} forward-equivalents of its {rows} sequences "
            f"({_parts(passes)}; a backward counted as {BACKWARD_FORWARDS:g}), {times:.3g}x the default "
            f"probe (one forward of the {self.probed_rows} probed sequences)"
        )
        if refused != self.expected:
            text += f"; {refused:.4g} if the model refuses the restart from the cached stream"
        self._say(text)

    def timed(self, track, counter):
        """`track` whose first loop times its first item and says the estimate (counter: the live count)."""
        state = {"done": False}

        def wrapped(it, description):
            inner = track(it, description)
            if state["done"]:
                return inner
            state["done"] = True
            return self._first_item(inner, counter)

        return wrapped

    def _first_item(self, items, counter):
        items = iter(items)
        first = next(items, _END)
        if first is _END:
            return
        w0, t0 = work(counter.summary()), time.perf_counter()
        yield first
        self._estimate(t0, w0, counter)  # the loop asked for its second item (or found the end)
        yield from items

    def _estimate(self, t0: float, w0: float, counter) -> None:
        took, done = time.perf_counter() - t0, work(counter.summary()) - w0
        if done <= 0:
            return
        self._say(
            f"importance pass: first batch {took:.3g} s for {done:.3g} forward-equivalents; "
            f"about {took / done * self.expected:.3g} s in all (estimate)"
        )
