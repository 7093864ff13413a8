"""MLP width schedules under an exact parameter budget: the paper's tapers and the allocation zoo.

A schedule is a shape r(t) over normalised depth t = l/(L-1). Widths are r(t)·d_ff rescaled so that their
mean is exactly d_ff, rounded down to `multiple_of`, and the leftover units are handed out by largest
remainder, so that sum(widths) == L·d_ff always holds. A monotone shape stays monotone after rounding: the
largest-remainder pass only moves a width to the next multiple, a layer with the larger ideal width never
gets the smaller remainder priority over one with the same floor, and ties go to the earlier layer.

The zoo (DESIGN.md section 1), each at the same budget:
- tapers linear | cosine | sigmoid (start -> end ratio); with start < end a *reversed* taper, allowed as a
  control and labelled so (`monotone` below), never a taper;
- openelm: OpenELM's linear growth of FFN width with depth (arXiv 2404.14619; multipliers 0.5 -> 4.0 by
  default), i.e. linear from `start` to `end`, rescaled to the budget;
- middle[:FRACTION]: MLPs only in the middle round(FRACTION·L) blocks (Lee et al., arXiv 2508.17734;
  default 0.7), which share the whole budget; the other blocks have d_l = 0 (no MLP). When L - k is odd
  the extra MLP-free block is at the end;
- hourglass[:WAIST:DEPTH]: narrowest at depth fraction DEPTH with WAIST x the end widths, widening
  geometrically (log-linear in distance) to both ends (the MLP-only analogue of arXiv 2606.18246);
- grouped controls wider-early | wider-middle | wider-late: the layers split in thirds by (3·l)//L; the
  wide third gains exactly M = round((wide_factor - 1)·d_ff·L/3) width (in multiples), spread evenly over
  its layers, and the other layers lose M. M does not depend on which third is wide, so at L % 3 != 0
  (thirds of unequal size) every control still moves the same capacity;
- explicit widths, or a schedule file (JSON, e.g. from `tlm schedule --from-probe`) holding them.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import read_json
from tlm_probe.registry import Registry


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


FILE = "file"
SCHEDULE_FORMAT = "tlm-schedule"


@dataclass(frozen=True)
class Shape:
    """One schedule name's row: the numbers its 'name:a:b' string takes (ScheduleSpec fields, in order), its
    defaults where they differ from ScheduleSpec's, and how it is made: `build(spec, n_layers)`, relative
    widths >= 0 that allocate() turns into the budget, or `widths(spec, n_layers, total)`, the widths."""

    params: tuple[str, ...] = ()
    build: Callable[[ScheduleSpec, int], list[float]] | None = None
    widths: Callable[[ScheduleSpec, int, int], list[int]] | None = None
    defaults: dict[str, float] = field(default_factory=dict)
    group: str = ""
    """taper (the grid shapes of `tlm sweep`, x --ratios) | zoo (with their own parameters) | grouped | ""."""


@dataclass(frozen=True)
class ScheduleSpec:
    """How a model's per-layer MLP widths were made (stored in every checkpoint config)."""

    name: str = "uniform"
    """uniform | linear | cosine | sigmoid | openelm | middle | hourglass | wider-early | wider-middle |
    wider-late | explicit | file"""
    start: float = 1.5
    """Width ratio at the first layer (tapers, openelm)."""
    end: float = 0.5
    """Width ratio at the last layer (tapers, openelm)."""
    steepness: float = 10.0
    """Logistic steepness for the sigmoid schedule."""
    wide_factor: float = 1.5
    """Width ratio of the wide third in the grouped schedules."""
    fraction: float = 0.7
    """middle: fraction of the blocks (the middle ones) that have an MLP."""
    waist: float = 0.3
    """hourglass: width at the waist as a fraction of the end widths (0 < waist <= 1)."""
    waist_depth: float = 0.75
    """hourglass: depth fraction t of the waist (0..1)."""
    multiple_of: int = 64
    """Every width is a multiple of this."""
    widths: tuple[int, ...] = field(default=())
    """Explicit widths (schedules 'explicit' and 'file')."""
    source: dict = field(default_factory=dict, hash=False, compare=False)
    """schedule 'file': the file and what made it (probe hash, statistic, rule)."""

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

    @property
    def monotone(self) -> str:
        """constant | non-increasing (a taper) | non-decreasing (reversed: a control) | not monotone."""
        return monotone_label(self.widths)

    @property
    def no_mlp_layers(self) -> tuple[int, ...]:
        """Blocks with d_l = 0 (no MLP)."""
        return tuple(i for i, w in enumerate(self.widths) if w == 0)

    @property
    def moved(self) -> int:
        """Width moved away from uniform: sum of max(0, d_l - d_ff) (the capacity a control shifts)."""
        return sum(max(0, w - self.d_ff) for w in self.widths)


MONOTONE_LABELS = {
    (True, True): "constant",
    (True, False): "non-increasing (a taper)",
    (False, True): "non-decreasing (reversed; a control, not a taper)",
    (False, False): "not monotone (a control, not a taper)",
}


def monotone_label(widths: Sequence[int]) -> str:
    pairs = list(zip(widths, widths[1:], strict=False))
    return MONOTONE_LABELS[(all(a >= b for a, b in pairs), all(a <= b for a, b in pairs))]


def parse_schedule(text: str, multiple_of: int = 64) -> ScheduleSpec:
    """Parse 'cosine:1.5:0.5', 'sigmoid:1.5:0.5:12', 'wider-early:1.5', 'middle:0.7', 'hourglass:0.3:0.75',
    'openelm:0.5:4', 'uniform', '4096,3072,...' or a schedule file 'path.json'."""
    text = text.strip()
    if text.endswith(".json"):
        return read_schedule_file(text)
    if "," in text or text.isdigit():
        try:
            widths = tuple(int(w) for w in text.split(","))
        except ValueError as e:
            raise ScheduleError(f"explicit widths must be integers, got {text!r}") from e
        return ScheduleSpec(name="explicit", widths=widths, multiple_of=multiple_of)
    name, *nums = text.split(":")
    row = SCHEDULES.get(name)
    keys = row.params
    if len(nums) > len(keys):
        raise ScheduleError(f"schedule {name!r} takes at most {len(keys)} number(s) "
                            f"({':'.join(keys) or 'none'}), got {text!r}")
    try:
        vals = [float(x) for x in nums]
    except ValueError as e:
        raise ScheduleError(f"schedule parameters must be numbers, got {text!r}") from e
    given = dict(zip(keys, vals, strict=False))
    return ScheduleSpec(name=name, multiple_of=multiple_of, **{**row.defaults, **given})


def read_schedule_file(path: str | Path) -> ScheduleSpec:
    """A schedule file (format 'tlm-schedule'): its widths and its recorded source."""
    path = Path(path)
    if not path.exists():
        raise ScheduleError(f"no schedule file {str(path)!r}")
    try:
        data = read_json(path)  # bounded: size, nesting, UTF-8
    except UserError as e:
        raise ScheduleError(f"cannot read schedule file {str(path)!r}: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict) or data.get("format") != SCHEDULE_FORMAT:
        raise ScheduleError(f"{str(path)!r} is not a schedule file (no \"format\": \"{SCHEDULE_FORMAT}\")")
    widths = data.get("widths")
    if not isinstance(widths, list) or not all(type(w) is int for w in widths):  # bool is an int: refuse
        raise ScheduleError(f"schedule file {str(path)!r}: widths must be a list of integers")
    source = {"file": str(path), "n_layers": data.get("n_layers"), "d_ff": data.get("d_ff"),
              **(data.get("source") or {})}
    return ScheduleSpec(name=FILE, widths=tuple(widths), multiple_of=int(data.get("multiple_of", 1)),
                        source=source)


def schedule_file_dict(widths: Sequence[int], d_ff: int, multiple_of: int, source: dict) -> dict:
    """The JSON object of a schedule file (read back by read_schedule_file)."""
    return {"format": SCHEDULE_FORMAT, "version": 1, "n_layers": len(widths), "d_ff": d_ff,
            "multiple_of": multiple_of, "widths": list(widths), "source": source}


MAX_STEEPNESS = 1000.0
PARAM_RANGES: dict[str, tuple[float, float, str]] = {
    "fraction": (0.0, 1.0, "in (0, 1]"),
    "waist": (0.0, 1.0, "in (0, 1]"),
}


def _count(value, what: str) -> int:
    """`value` as a Python int: NumPy's integers are integers; a bool, 9.0 or '9' is not."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ScheduleError(f"{what} must be an integer, got {value!r}")
    return int(value)


def _check_inputs(spec: ScheduleSpec, n_layers: int, d_ff: int) -> None:
    SCHEDULES.check(spec.name)
    if n_layers < 1:
        raise ScheduleError(f"number of layers must be >= 1, got {n_layers!r}")
    if spec.multiple_of < 1:
        raise ScheduleError(f"multiple_of must be >= 1, got {spec.multiple_of!r}")
    if d_ff < 1 or d_ff % spec.multiple_of:
        raise ScheduleError(f"d_ff={d_ff!r} must be a positive multiple of multiple_of={spec.multiple_of}")
    check_params(spec)


def check_params(spec: ScheduleSpec) -> None:
    """The spec's numbers are in range (what does not depend on L or d_ff)."""
    for key in ("start", "end", "steepness", "wide_factor", "fraction", "waist"):
        val = getattr(spec, key)
        if not math.isfinite(val) or val <= 0:
            raise ScheduleError(f"{key} must be a finite positive number, got {val!r}")
    for key, (lo, hi, text) in PARAM_RANGES.items():
        if not lo < getattr(spec, key) <= hi:
            raise ScheduleError(f"{key} must be {text}, got {getattr(spec, key)!r}")
    if not 0.0 <= spec.waist_depth <= 1.0:  # also refuses nan
        raise ScheduleError(f"waist_depth must be in [0, 1], got {spec.waist_depth!r}")
    if spec.name == "sigmoid" and spec.steepness > MAX_STEEPNESS:  # exp(steepness/2) overflows a float
        raise ScheduleError(f"sigmoid steepness must be <= {MAX_STEEPNESS:g} (already a step at ~100), "
                            f"got {spec.steepness:g}")


def _depths(n_layers: int) -> list[float]:
    return [i / (n_layers - 1) if n_layers > 1 else 0.0 for i in range(n_layers)]


def _taper(fn: Callable[[float, float, float, float], float]) -> Callable[[ScheduleSpec, int], list[float]]:
    """The builder of a shape r(t; start, end, steepness)."""
    return lambda spec, n_layers: [fn(t, spec.start, spec.end, spec.steepness) for t in _depths(n_layers)]


def _middle(spec: ScheduleSpec, n_layers: int) -> list[float]:
    k = max(1, math.floor(spec.fraction * n_layers + 0.5))
    first = (n_layers - k) // 2
    return [1.0 if first <= i < first + k else 0.0 for i in range(n_layers)]


def _hourglass(spec: ScheduleSpec, n_layers: int) -> list[float]:
    d = spec.waist_depth

    def r(t: float) -> float:
        side = d if t < d else 1.0 - d
        return spec.waist if side == 0 else spec.waist ** (1.0 - abs(t - d) / side)

    return [r(t) for t in _depths(n_layers)]




def allocate(shape: Sequence[float], d_ff: int, multiple_of: int, allow_zero: bool = False) -> list[int]:
    """Turn a non-negative shape into widths with sum == len(shape)·d_ff, each a multiple of `multiple_of`.

    A layer whose shape is exactly 0 gets width 0 (no MLP); a positive one that would round to 0 is
    refused unless allow_zero."""
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
        if u < 1 and shape[i] > 0 and not allow_zero:
            raise ScheduleError(
                f"layer {i} width rounds to {u * multiple_of} (ideal {ideal[i] * multiple_of:.1f}); "
                f"raise d_ff or lower multiple_of={multiple_of}"
            )
    return [u * multiple_of for u in units]


def _spread(total: int, n: int, late: bool) -> list[int]:
    """total units split over n layers as evenly as integers allow; the extra units go to the earliest
    (late=False) or latest (late=True) layers."""
    base, extra = divmod(total, n)
    out = [base + (i < extra) for i in range(n)]
    return out[::-1] if late else out


def grouped_widths(third: int, spec: ScheduleSpec, n_layers: int, d_ff: int) -> list[int]:
    """Grouped control: the wide third gains M units, the rest lose M, M the same for every third."""
    if n_layers < 3:
        raise ScheduleError(f"grouped schedules need at least 3 layers, got {n_layers}")
    unit = spec.multiple_of
    groups = [(i * 3) // n_layers for i in range(n_layers)]
    wide = [i for i, g in enumerate(groups) if g == third]
    narrow = [i for i in range(n_layers) if i not in wide]
    moved = math.floor((spec.wide_factor - 1.0) * d_ff / unit * n_layers / 3 + 0.5)
    if moved < 0:
        raise ScheduleError(f"wide_factor must be >= 1 (the wide third is the wider), got {spec.wide_factor}")
    units = [d_ff // unit] * n_layers
    late = third == 2  # rounding leftovers placed so that wider-early/-late stay monotone
    for i, extra in zip(wide, _spread(moved, len(wide), late=late), strict=True):
        units[i] += extra
    for i, loss in zip(narrow, _spread(moved, len(narrow), late=not late), strict=True):
        units[i] -= loss
    if min(units) < 1:
        raise ScheduleError(f"wide_factor={spec.wide_factor} leaves no width for the narrow layers; "
                            "raise d_ff or lower wide_factor")
    return [u * unit for u in units]


def shape_widths(spec: ScheduleSpec, n_layers: int, total: int, allow_zero: bool = False) -> list[int]:
    """The schedule's per-layer widths (multiples of spec.multiple_of) summing to n_layers·total."""
    row = SCHEDULES.get(spec.name)
    if row.widths is not None:
        return row.widths(spec, n_layers, total)
    return allocate(row.build(spec, n_layers), total, spec.multiple_of, allow_zero)


def make_schedule(spec: ScheduleSpec | str, n_layers: int, d_ff: int) -> Schedule:
    """Per-layer MLP widths with exactly the uniform budget n_layers·d_ff."""
    if isinstance(spec, str):
        spec = parse_schedule(spec)
    n_layers, d_ff = _count(n_layers, "number of layers"), _count(d_ff, "d_ff")
    _check_inputs(spec, n_layers, d_ff)
    widths = shape_widths(spec, n_layers, d_ff)
    return Schedule(spec, n_layers, d_ff, tuple(widths), widths[0] / d_ff, widths[-1] / d_ff)


def _explicit(spec: ScheduleSpec, n_layers: int, d_ff: int) -> list[int]:
    widths = list(spec.widths)
    what = f"schedule file {spec.source.get('file')!r}" if spec.name == FILE else "explicit schedule"
    if len(widths) != n_layers:
        raise ScheduleError(f"{what} has {len(widths)} widths but the model has {n_layers} layers")
    bad = [w for w in widths if w < 0]
    if bad or not any(widths):
        raise ScheduleError(f"{what}: widths must be >= 0 (0: no MLP) and not all 0, got {bad[:1] or 0}")
    if sum(widths) != n_layers * d_ff:
        raise ScheduleError(
            f"{what}: widths sum to {sum(widths)}, not the budget {n_layers}·{d_ff} = {n_layers * d_ff}"
        )
    return widths


_TWO = ("start", "end")
SCHEDULES: Registry[Shape] = Registry("schedule", {
    "uniform": Shape(build=lambda spec, n_layers: [1.0] * n_layers),
    "linear": Shape(_TWO, _taper(_linear), group="taper"),
    "cosine": Shape(_TWO, _taper(_cosine), group="taper"),
    "sigmoid": Shape((*_TWO, "steepness"), _taper(_sigmoid), group="taper"),
    # OpenELM: linear with OpenELM's multiplier range
    "openelm": Shape(_TWO, _taper(_linear), defaults={"start": 0.5, "end": 4.0}, group="zoo"),
    "middle": Shape(("fraction",), _middle, group="zoo"),
    "hourglass": Shape(("waist", "waist_depth"), _hourglass, group="zoo"),
    **{name: Shape(("wide_factor",), widths=partial(grouped_widths, third), group="grouped")
       for third, name in enumerate(("wider-early", "wider-middle", "wider-late"))},
    "explicit": Shape(widths=_explicit),
    FILE: Shape(widths=_explicit),
}, error=ScheduleError)
"""Every schedule name -> its row (Shape); a new shape is one row here (or a `SCHEDULES.register` call)."""
