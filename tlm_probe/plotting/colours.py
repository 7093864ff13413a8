"""One model, one look, everywhere: a model or arm name -> colour, line style and marker.

A pure function of the name. What else a figure holds, and in which order, never changes it, so an arm
looks the same in `tlm demo`'s figures, in every `tlm plot` kind and in every figure of a report:

- known arms (the baseline, the paper's tapers, the allocation zoo, the probe-derived schedule) have fixed
  entries in KNOWN, in the colour-blind-safe Okabe-Ito palette (plus three of seaborn's "colorblind"
  colours), each with its own colour, marker and line style. Arms that share a line style differ in
  luminance by at least MIN_GREY_STEP, so they stay apart printed in greyscale;
- a taper spelt with its default numbers is the same arm ('cosine' = 'cosine:1.5:0.5'), and so are a
  schedule file of the probe-derived schedule ('probe-derived.json', 'results/probe-derived.json') and a
  run-folder spelling of a spec ('cosine_1.5_0.5', as analyses/confirm.py names its runs);
- any other name (a pretrained model, a taper with other numbers, an arm of another mixer) is hashed (MD5:
  the same in every process) into HASHED_COLOURS (never uniform's black or the cosine taper's blue), a
  line style and one of HASHED_MARKERS, markers no known arm uses, so an unknown model never looks exactly
  like a known arm;
- the seeds of an arm (`<arm>-s<seed>`, as `tlm compare` and `tlm demo` name runs) share its look: one
  hue per arm, whether a figure shows one seed, a seed mean or every seed.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache

from matplotlib.colors import to_rgb

from tlm_probe.schedules.widths import SCHEDULES, ScheduleSpec, Shape

RUN_NAME = re.compile(r"^(?P<arm>.+)-s(?P<seed>\d+)$")  # `tlm compare` names run folders <arm>-s<seed>
SPEC_IN_A_FOLDER_NAME = re.compile(r"^(?P<shape>[a-z-]+)(?P<numbers>(?:_[0-9.]+)+)$")  # cosine_1.5_0.5

# Okabe & Ito (2008), "Color Universal Design", plus three colours of seaborn's "colorblind" palette
BLACK, BLUE, VERMILLION, GREEN = "#000000", "#0072B2", "#D55E00", "#009E73"
SKY_BLUE, ORANGE, PURPLE, YELLOW = "#56B4E9", "#E69F00", "#CC79A7", "#F0E442"
BROWN, PINK, GREY = "#CA9161", "#FBAFE4", "#949494"

SOLID, DASHED, DASHDOT, DOTTED = "-", "--", "-.", ":"
DASHDOTDOT = (0, (6.0, 1.5, 1.0, 1.5, 1.0, 1.5))
LINE_STYLES = (SOLID, DASHED, DASHDOT, DOTTED, DASHDOTDOT)

MIN_GREY_STEP = 0.15  # luminance (0-1) between two known arms drawn with the same line style


@dataclass(frozen=True)
class ArmStyle:
    """How one model or arm is drawn: matplotlib's color, linestyle and marker."""

    colour: str
    linestyle: str | tuple
    marker: str
    known: bool = True  # False: hashed from the name

    def line(self, **kw) -> dict:
        """Keywords for Axes.plot: colour, line style and marker (the caller's `kw` win)."""
        return {"color": self.colour, "linestyle": self.linestyle, "marker": self.marker, **kw}


KNOWN: dict[str, ArmStyle] = {
    "uniform": ArmStyle(BLACK, SOLID, "o"),
    "cosine": ArmStyle(BLUE, DASHED, "s"),  # cosine:1.5:0.5
    "hourglass": ArmStyle(VERMILLION, DASHDOT, "D"),
    "probe-derived": ArmStyle(GREEN, DOTTED, "^"),
    "linear": ArmStyle(SKY_BLUE, SOLID, "v"),  # linear:1.5:0.5
    "sigmoid": ArmStyle(ORANGE, DASHDOT, "P"),  # sigmoid:1.5:0.5
    "openelm": ArmStyle(PURPLE, DASHED, "X"),
    "middle": ArmStyle(BROWN, DOTTED, "d"),
    "wider-early": ArmStyle(YELLOW, SOLID, "p"),
    "wider-middle": ArmStyle(PINK, DASHED, "h"),
    "wider-late": ArmStyle(GREY, DASHDOTDOT, "*"),
}
"""Shape (spelt with its default numbers, or alone) -> its fixed look."""

# not the colours of the demo's arms (uniform black, the cosine taper blue), which most figures hold next
# to a pretrained model, and not the pale ones (yellow, pink: thin lines hard to see)
HASHED_COLOURS = (ORANGE, SKY_BLUE, GREEN, VERMILLION, PURPLE, BROWN, GREY)
HASHED_MARKERS = ("<", ">", "8", "H")  # filled, and used by no known arm


def split_name(name: str) -> tuple[str, int | None]:
    """'cosine:1.5:0.5-s2' -> ('cosine:1.5:0.5', 2); a name that is no run of a comparison is its own arm."""
    m = RUN_NAME.match(str(name))
    return (m["arm"], int(m["seed"])) if m else (str(name), None)


def arm_of(name: str) -> str:
    return split_name(name)[0]


def arm_style(name: str) -> ArmStyle:
    """The look of a model or arm `name` (a seed `<arm>-s<k>` looks like its arm)."""
    return _style(arm_of(str(name)))


def known_shape(arm: str) -> str | None:
    """The KNOWN entry `arm` names ('cosine:1.5:0.5', 'cosine', 'cosine_1.5_0.5', 'x/probe-derived.json'),
    or None (another name, or a known shape with other numbers)."""
    key = arm.strip().lower()
    if key.endswith(".json"):  # a schedule file, wherever it lies (a run folder spells '/' as '_')
        return "probe-derived" if re.split(r"[/\\_]", key[: -len(".json")])[-1] == "probe-derived" else None
    m = SPEC_IN_A_FOLDER_NAME.match(key)
    if m:
        key = m["shape"] + m["numbers"].replace("_", ":")
    shape, *numbers = key.split(":")
    if shape not in KNOWN:
        return None
    return shape if _default_numbers(shape, numbers) else None


def _default_numbers(shape: str, numbers: list[str]) -> bool:
    row = SCHEDULES.get(shape) if shape in SCHEDULES else Shape()  # probe-derived: a KNOWN arm, no shape
    keys = row.params
    if len(numbers) > len(keys):
        return False
    spec = ScheduleSpec()
    try:
        given = [float(n) for n in numbers]
    except ValueError:
        return False
    defaults = [row.defaults.get(k, getattr(spec, k)) for k in keys]
    return all(abs(g - d) < 1e-9 for g, d in zip(given, defaults, strict=False))


@lru_cache(maxsize=4096)
def _style(arm: str) -> ArmStyle:
    shape = known_shape(arm)
    if shape is not None:
        return KNOWN[shape]
    digest = hashlib.md5(arm.encode("utf-8"), usedforsecurity=False).digest()  # stable, unlike hash()
    colour = HASHED_COLOURS[digest[0] % len(HASHED_COLOURS)]
    linestyle = LINE_STYLES[digest[1] % len(LINE_STYLES)]
    return ArmStyle(colour, linestyle, HASHED_MARKERS[digest[2] % len(HASHED_MARKERS)], known=False)


def distinct_colours(names) -> dict[str, str]:
    """arm -> colour for the arms of `names`, no two alike: a known arm keeps its colour; a hashed one keeps
    its own where no other arm here has it, else takes the first of HASHED_COLOURS (then of the known
    colours) that none has. Decided by the set of names alone (in sorted order), not the order they came
    in: `tlm report` draws every figure of a page with it, so each model has one colour there."""
    arms = sorted(dict.fromkeys(arm_of(str(n)) for n in names))
    out = {a: _style(a).colour for a in arms if _style(a).known}
    spare = [c for c in (*HASHED_COLOURS, *(k.colour for k in KNOWN.values())) if c not in out.values()]
    for arm in (a for a in arms if a not in out):
        own = _style(arm).colour
        colour = own if own not in out.values() else next((c for c in spare if c not in out.values()), own)
        out[arm] = colour
    return out


def luminance(colour) -> float:
    """Grey level (0 black - 1 white) of a colour printed in greyscale: Rec. 601 luma, what PIL's
    convert("L") computes."""
    r, g, b = to_rgb(colour)
    return 0.299 * r + 0.587 * g + 0.114 * b


def ink_on(colour) -> str:
    """A grey for lines across a patch of `colour` and the white around it (error bars): mid grey on a
    near-black patch (uniform's), dark grey on the others."""
    return "0.55" if luminance(colour) < 0.2 else "0.15"
