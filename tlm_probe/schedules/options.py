"""`tlm schedule`'s options that belong to schedules: the shape and its parameters, what it tapers
(ScheduleOptions), and how a probe's per-layer statistic becomes one (FromProbeOptions). Kw-only frozen
dataclasses whose field docstrings are the help (commands/options.py generates the CLI from them); pure, no
model code and no torch, so that the CLI builds them at start-up for free.

The defaults are the library's own: a shape parameter left at None takes ScheduleSpec's default (or the
shape's own, its SCHEDULES row's: OpenELM's multipliers), and a rule's defaults are Rule's.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeAlias

from tlm_probe.ranges import check_values
from tlm_probe.schedules.heads import COMPONENTS
from tlm_probe.schedules.rules import TRANSFORMS, Monotone, Rule, check_rule
from tlm_probe.schedules.widths import FILE, SCHEDULES, ScheduleError, ScheduleSpec

MAX_LAYERS = 10_000
"""The most layers a schedule is made for (trained transformers have ~10^2): more is a typo or a corrupt
probe table, refused before an allocation whose cost grows with L runs."""
MAX_WIDTH = 2**20
"""The widest uniform MLP (d_ff) or residual (d_model) a schedule is accounted for: 1,048,576, some 14x
the widest trained dense model's d_ff (PaLM 540B: 73,728). More is a typo or a corrupt probe table."""

if TYPE_CHECKING:  # a registry's keys are known at run time: to a type checker, these are any text
    Component: TypeAlias = str
    Transform: TypeAlias = str
else:  # the closed choice the CLI offers and check_values enforces (ranges.literal_values)
    Component = Literal[tuple(COMPONENTS)]
    Transform = Literal[tuple(TRANSFORMS)]



def _shape_help(text: str, key: str) -> str:
    """The help of a shape parameter, its default taken from ScheduleSpec (and from the SCHEDULES rows whose
    own differs), so that the help cannot drift from the value used."""
    other = "".join(f"; {n}: {row.defaults[key]:g}" for n, row in SCHEDULES.items() if key in row.defaults)
    return text.format(default=f"{getattr(ScheduleSpec, key):g}{other}")


def schedule_text(schedule) -> str:
    """--schedule's text from a library caller's value: text as is, a schedule file's Path, or a list of
    widths (the explicit schedule '512,256,...'); anything else one ScheduleError."""
    if isinstance(schedule, Path):
        return str(schedule)
    if isinstance(schedule, list | tuple) and schedule and all(
            isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in schedule):
        return ",".join(str(int(w)) for w in schedule)
    if not isinstance(schedule, str):
        raise ScheduleError(f"a schedule is text (cosine, linear:1.5:0.5, '512,256,...', x.json) or a list "
                            f"of widths, not {schedule!r}")
    return schedule


@dataclass(frozen=True, kw_only=True)
class ScheduleOptions:
    """What `tlm schedule` tapers, and how: the shape, its parameters, the rounding, the component."""

    schedule: str = field(default="cosine", metadata={"help": "|".join(
        name + (f"[:{':'.join(row.params).upper()}]" if row.params else "")
        for name, row in SCHEDULES.items() if name not in ("explicit", FILE))
        + ", explicit widths '4096,4096,...' (0: no MLP), or a schedule file 'x.json'."})
    """A schedule name[:its numbers] (SCHEDULES), explicit widths '4096,4096,...' or a schedule file."""
    start: float | None = field(default=None, metadata={
        "help": _shape_help("Start ratio r_s (tapers; default: {default}).", "start")})
    """Start ratio r_s (tapers; None: the shape's own, ScheduleSpec.start or its row's)."""
    end: float | None = field(default=None, metadata={
        "help": _shape_help("End ratio r_e (tapers; default: {default}).", "end")})
    """End ratio r_e (tapers; None: the shape's own, ScheduleSpec.end or its row's)."""
    steepness: float | None = field(default=None, metadata={
        "help": _shape_help("Sigmoid steepness (default: {default}).", "steepness")})
    """Sigmoid steepness (None: ScheduleSpec.steepness)."""
    wide_factor: float | None = field(default=None, metadata={
        "help": _shape_help("Width ratio of the wide third (grouped; default: {default}).", "wide_factor")})
    """Width ratio of the wide third of the grouped controls (None: ScheduleSpec.wide_factor)."""
    multiple_of: int = ScheduleSpec.multiple_of
    """Round every width to a multiple of this."""
    component: Component = "mlp"
    """What --schedule tapers: mlp (MLP width d_l), heads (query heads, in units of one GQA group), kv
    (key/value heads, each dividing its layer's query heads) or mem (--mixer titans: the memory MLP's hidden
    width, multiples of 8)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "schedule", schedule_text(self.schedule))  # a list of widths: its text
        check_values(self)

    def given(self) -> dict[str, float]:
        """The shape parameters set by flag (not left to the shape's default)."""
        keys = ("start", "end", "steepness", "wide_factor")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}


@dataclass(frozen=True, kw_only=True)
class FromProbeOptions:
    """`tlm schedule --from-probe`: a schedule file from a probe's per-layer statistic (the writer in
    commands/schedule_from_probe.py takes this object). The rule's defaults are Rule's."""

    from_probe: Path | None = None
    """A probe result folder: widths (or, with --component heads, query heads) ∝ a function of its
    per-layer --statistic (writes --out FILE.json)."""
    statistic: str | None = None
    """--from-probe: the per-layer statistic (e.g. ablation_dnll_mlp_zero, align_mlp_mid, taylor_mlp,
    effective_rank)."""
    rule: Transform = Rule.transform
    """--from-probe: f in widths ∝ max(0, f(x))^power."""
    power: float = Rule.power
    """--from-probe: exponent on the weights."""
    min_ratio: float = Rule.min_ratio
    """--from-probe: smallest d_l/d_ff (0 allows no MLP)."""
    max_ratio: float = Rule.max_ratio
    """--from-probe: largest d_l/d_ff."""
    monotone: Monotone = Rule.monotone
    """--from-probe: isotonic projection of the weights."""
    model: str | None = None
    """--from-probe: the model, when the probe holds several."""
    out: Path | None = None
    """--from-probe: the schedule file to write."""
    check_with: Path | None = None
    """--from-probe: a second probe of the same model on disjoint tokens (`tlm probe --half a` / `--half
    b`, or another split): the widths derived from both must agree within --max-unstable rounding units,
    else nothing is written."""
    trust: Path | None = None
    """--from-probe: a `tlm trust` folder of the same model: the widths derived from each of its corpora and
    from each half of its tokens must agree within --max-unstable rounding units, else nothing is written
    (checked without it when --from-probe is itself a trust folder)."""
    max_unstable: int = 1
    """--check-with / --trust: the largest width difference, in rounding units, still counted as stable."""
    allow_unstable: bool = False
    """--check-with / --trust: write the schedule even when it is not stable, with a warning (the file
    records the difference)."""

    def __post_init__(self) -> None:
        check_values(self)
        check_rule(self.how, 1)  # a bad rule is refused before the probe is read
        if self.from_probe is None:
            given = [f"--{k.replace('_', '-')}" for k in ("statistic", "model", "out", "trust", "check_with")
                     if getattr(self, k) is not None]
            if given:  # they would be ignored: say so
                raise ScheduleError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} read only with "
                                    "--from-probe; drop it or add --from-probe PROBE_DIR")
            return
        for flag in ("from_probe", "check_with", "trust"):  # named here, not as "no results.csv in ."
            folder = getattr(self, flag)
            if folder is not None and not Path(folder).is_dir():
                what = "is not a folder" if Path(folder).exists() else "does not exist"
                raise ScheduleError(f"--{flag.replace('_', '-')} {folder} {what} (give a `tlm probe --out` "
                                    f"{'or `tlm trust --out` ' if flag != 'check_with' else ''}folder)")
        if self.statistic is None:
            raise ScheduleError("--from-probe needs --statistic NAME")
        if self.out is None:
            raise ScheduleError("--from-probe writes a schedule file: give --out FILE.json")

    @property
    def how(self) -> Rule:
        """The rule that turns the statistic into widths."""
        return Rule(self.rule, self.power, self.min_ratio, self.max_ratio, self.monotone)
