"""MLP width schedules under an exact parameter budget.

A schedule is a shape r(t) over normalised depth t = l/(L-1). Widths are r(t)·d_ff rescaled so that their
mean is exactly d_ff, rounded down to `multiple_of`, and the leftover units are handed out by largest
remainder, so that sum(widths) == L·d_ff always holds. Tapers stay monotone after rounding because the
largest-remainder pass only ever moves a width to the next multiple and ties go to the earlier layer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from tlm_probe.errors import UserError


class ScheduleError(UserError, ValueError):
    """An impossible schedule request; the message names the bad value."""


def _linear(t: float, rs: float, re: float, _: float) -> float:
    return rs + (re - rs) * t


def _cosine(t: float, rs: float, re: float, _: float) -> float:
    return re + (rs - re) * (1.0 + math.cos(math.pi * t)) / 2.0


def _sigmoid(t: float, rs: float, re: float, steepness: float) -> float:
    # centred logistic, normalised so that s(0) = 0 and s(1) = 1 (symmetric about t = 1/2)
    def s(x: float) -> float:
        return 1.0 / (1.0 + math.exp(-steepness * (x - 0.5)))

    lo, hi = s(0.0), s(1.0)
    return rs + (re - rs) * (s(t) - lo) / (hi - lo)


def _uniform(t: float, rs: float, re: float, _: float) -> float:
    return 1.0


SHAPES: dict[str, Callable[[float, float, float, float], float]] = {
    "uniform": _uniform,
    "linear": _linear,
    "cosine": _cosine,
    "sigmoid": _sigmoid,
}
GROUPED = {"wider-early": 0, "wider-middle": 1, "wider-late": 2}
SCHEDULES = (*SHAPES, *GROUPED, "explicit")


@dataclass(frozen=True)
class ScheduleSpec:
    """How a model's per-layer MLP widths were made (stored in every checkpoint config)."""

    name: str = "uniform"
    """uniform | linear | cosine | sigmoid | wider-early | wider-middle | wider-late | explicit"""
    start: float = 1.5
    """Width ratio at the first layer (tapers)."""
    end: float = 0.5
    """Width ratio at the last layer (tapers)."""
    steepness: float = 10.0
    """Logistic steepness for the sigmoid schedule."""
    wide_factor: float = 1.5
    """Width ratio of the wide third in the grouped schedules."""
    multiple_of: int = 64
    """Every width is a multiple of this."""
    widths: tuple[int, ...] = field(default=())
    """Explicit widths (schedule 'explicit')."""

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Schedule:
    spec: ScheduleSpec
    n_layers: int
    d_ff: int
    widths: tuple[int, ...]
    effective_start: float
    effective_end: float

    @property
    def total(self) -> int:
        return sum(self.widths)

    @property
    def uniform_total(self) -> int:
        return self.n_layers * self.d_ff


def parse_schedule(text: str, multiple_of: int = 64) -> ScheduleSpec:
    """Parse 'cosine:1.5:0.5', 'sigmoid:1.5:0.5:12', 'wider-early:1.5', 'uniform' or '4096,3072,...'."""
    text = text.strip()
    if "," in text or text.isdigit():
        try:
            widths = tuple(int(w) for w in text.split(","))
        except ValueError as e:
            raise ScheduleError(f"explicit widths must be integers, got {text!r}") from e
        return ScheduleSpec(name="explicit", widths=widths, multiple_of=multiple_of)
    name, *nums = text.split(":")
    _check_name(name)
    try:
        vals = [float(x) for x in nums]
    except ValueError as e:
        raise ScheduleError(f"schedule parameters must be numbers, got {text!r}") from e
    if name in GROUPED:
        return ScheduleSpec(name=name, wide_factor=vals[0] if vals else 1.5, multiple_of=multiple_of)
    keys = ("start", "end", "steepness")
    return ScheduleSpec(name=name, multiple_of=multiple_of, **dict(zip(keys, vals, strict=False)))


def _check_name(name: str) -> None:
    if name not in SCHEDULES:
        raise ScheduleError(f"unknown schedule {name!r}; choose one of: {', '.join(SCHEDULES)}")


MAX_STEEPNESS = 1000.0


def _check_inputs(spec: ScheduleSpec, n_layers: int, d_ff: int) -> None:
    _check_name(spec.name)
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ScheduleError(f"number of layers must be >= 1, got {n_layers!r}")
    if spec.multiple_of < 1:
        raise ScheduleError(f"multiple_of must be >= 1, got {spec.multiple_of!r}")
    if d_ff < 1 or d_ff % spec.multiple_of:
        raise ScheduleError(f"d_ff={d_ff!r} must be a positive multiple of multiple_of={spec.multiple_of}")
    for key in ("start", "end", "steepness", "wide_factor"):
        val = getattr(spec, key)
        if not math.isfinite(val) or val <= 0:
            raise ScheduleError(f"{key} must be a finite positive number, got {val!r}")
    if spec.name == "sigmoid" and spec.steepness > MAX_STEEPNESS:  # exp(steepness/2) overflows a float
        raise ScheduleError(f"sigmoid steepness must be <= {MAX_STEEPNESS:g} (already a step at ~100), "
                            f"got {spec.steepness:g}")


def _shape(spec: ScheduleSpec, n_layers: int) -> list[float]:
    if spec.name in GROUPED:
        return _grouped_shape(GROUPED[spec.name], spec.wide_factor, n_layers)
    fn = SHAPES[spec.name]
    ts = [i / (n_layers - 1) if n_layers > 1 else 0.0 for i in range(n_layers)]
    return [fn(t, spec.start, spec.end, spec.steepness) for t in ts]


def _grouped_shape(wide: int, factor: float, n_layers: int) -> list[float]:
    if n_layers < 3:
        raise ScheduleError(f"grouped schedules need at least 3 layers, got {n_layers}")
    groups = [(i * 3) // n_layers for i in range(n_layers)]
    n_wide = groups.count(wide)
    narrow = (n_layers - factor * n_wide) / (n_layers - n_wide)
    if narrow <= 0:
        raise ScheduleError(f"wide_factor={factor} leaves no width for the narrow layers")
    return [factor if g == wide else narrow for g in groups]


def allocate(shape: Sequence[float], d_ff: int, multiple_of: int) -> list[int]:
    """Turn a positive shape into widths with sum == len(shape)·d_ff, each a multiple of `multiple_of`."""
    n = len(shape)
    mean = sum(shape) / n
    units_total = n * d_ff // multiple_of
    ideal = [s / mean * d_ff / multiple_of for s in shape]  # in units of multiple_of
    units = [math.floor(x) for x in ideal]
    leftover = units_total - sum(units)
    # largest remainder; ties broken by earlier layer so that a taper stays non-increasing
    order = sorted(range(n), key=lambda i: (-(ideal[i] - units[i]), i))
    for i in order[:leftover]:
        units[i] += 1
    for i, u in enumerate(units):
        if u < 1:
            raise ScheduleError(
                f"layer {i} width rounds to {u * multiple_of} (ideal {ideal[i] * multiple_of:.1f}); "
                f"raise d_ff or lower multiple_of={multiple_of}"
            )
    return [u * multiple_of for u in units]


def make_schedule(spec: ScheduleSpec | str, n_layers: int, d_ff: int) -> Schedule:
    """Per-layer MLP widths with exactly the uniform budget n_layers·d_ff."""
    if isinstance(spec, str):
        spec = parse_schedule(spec)
    _check_inputs(spec, n_layers, d_ff)
    if spec.name == "explicit":
        widths = _explicit(spec, n_layers, d_ff)
    else:
        widths = allocate(_shape(spec, n_layers), d_ff, spec.multiple_of)
    return Schedule(spec, n_layers, d_ff, tuple(widths), widths[0] / d_ff, widths[-1] / d_ff)


def _explicit(spec: ScheduleSpec, n_layers: int, d_ff: int) -> list[int]:
    widths = list(spec.widths)
    if len(widths) != n_layers:
        raise ScheduleError(f"explicit schedule has {len(widths)} widths but the model has {n_layers} layers")
    bad = [w for w in widths if w < 1]
    if bad:
        raise ScheduleError(f"explicit widths must be positive, got {bad[0]}")
    if sum(widths) != n_layers * d_ff:
        raise ScheduleError(
            f"explicit widths sum to {sum(widths)}, not the budget {n_layers}·{d_ff} = {n_layers * d_ff}"
        )
    return widths
