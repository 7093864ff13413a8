"""A loss that explodes while staying finite (lr 50: 5.6M nats) is a divergence too, not a success.

A freshly initialised model predicts about uniformly: its loss starts near ln V (V the vocabulary).
A mean next-token loss of FACTOR x max(start, ln V) means the true token gets, on average, probability
below V^-FACTOR: far worse than the uniform guess the run started from, a model that has been broken, not
one that learns slowly. One such step can be a spike that clipping pulls back at once, so a run is stopped
only after WINDOW consecutive steps above the limit. The state (start loss, steps above) goes into the
checkpoint so a resumed run decides exactly as an uninterrupted one.
"""

from __future__ import annotations

import math

FACTOR = 4.0
WINDOW = 3


class LossGuard:
    def __init__(self, vocab_size: int):
        self.ln_v = math.log(max(vocab_size, 2))
        self.start: float | None = None  # the loss of the run's first step
        self.above = 0  # consecutive steps above the limit, up to the current one

    @property
    def limit(self) -> float:
        return FACTOR * max(self.start if self.start is not None else 0.0, self.ln_v)

    @property
    def rising(self) -> bool:
        """The latest step was above the limit: its weights are no checkpoint to keep."""
        return self.above > 0

    def check(self, loss: float) -> str | None:
        """Record one step's (finite) mean loss; a description when the run has exploded, else None."""
        if self.start is None:
            self.start = loss
        self.above = self.above + 1 if loss > self.limit else 0
        return self.describe(loss) if self.above >= WINDOW else None

    def describe(self, loss: float) -> str:
        return (
            f"loss {loss:.4g} above {FACTOR:g} x max(start {self.start:.4g}, ln V {self.ln_v:.4g}) = "
            f"{self.limit:.4g} for {self.above} step{'s' * (self.above != 1)}"
        )

    def state_dict(self) -> dict:
        return {"start": self.start, "above": self.above}

    def load_state_dict(self, state: dict) -> None:
        start = state.get("start")
        self.start = float(start) if isinstance(start, (int, float)) else None
        above = state.get("above", 0)
        self.above = int(above) if isinstance(above, int) else 0
