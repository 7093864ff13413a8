"""Who is who in a figure: a model's arm and seed, one look per arm, seeds of an arm summarised.

`tlm compare` and `tlm demo` name runs `<arm>-s<seed>`, and a probe names its model after the run folder,
so the names alone say which lines are seeds of one arm. An arm's colour, line style and marker come from
plotting.colours: a function of its name alone, never of the other arms or of the order the inputs came
in, so one arm looks the same in every figure. A caller may still pass its own arm -> colour map.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

import numpy as np
import pandas as pd

from tlm_probe.plotting.colours import RUN_NAME, ArmStyle, arm_of, arm_style, split_name  # noqa: F401


def style_for(name: str, colours: Mapping[str, tuple] | None = None) -> ArmStyle:
    """The look (plotting.colours.ArmStyle) of a model: its arm's, with the colour a caller's `colours`
    map (arm -> colour) gives it, if any."""
    style = arm_style(name)
    arm = arm_of(name)
    if colours and arm in colours:
        return replace(style, colour=colours[arm])
    return style


def colour_for(name: str, colours: Mapping[str, tuple] | None = None):
    """The colour of a model: its arm's (a caller's `colours` map first)."""
    return style_for(name, colours).colour


def entries(models: Iterable[str]) -> dict[str, list[str]]:
    """Legend entries -> the models each stands for, in first-appearance order. Two or more seeds of one
    arm make one entry named after the arm; anything else is its own entry under its own name."""
    models = list(dict.fromkeys(map(str, models)))
    by_arm: dict[str, list[str]] = {}
    for m in models:
        by_arm.setdefault(arm_of(m), []).append(m)
    out: dict[str, list[str]] = {}
    for m in models:
        group = by_arm[arm_of(m)]
        if len(group) > 1 and all(split_name(x)[1] is not None for x in group):
            out.setdefault(arm_of(m), []).append(m)
        else:
            out[m] = [m]
    return out


def entry_label(entry: str, members: list[str]) -> str:
    return f"{entry} (mean of {len(members)} seeds)" if len(members) > 1 else entry


def seed_summary(rows: pd.DataFrame, members: list[str], x: str) -> pd.DataFrame:
    """Per value of `x` (depth or layer): the mean over `members` of `value`, the sample std over them
    (ddof 1; NaN for one member), the member count, and the mean `d_ff` and max `n_tokens`. One member
    keeps its own confidence interval; a seed mean has none (its spread is the band of seeds)."""
    one = rows[rows["model"].astype(str).isin(members)]
    g = one.groupby(x, sort=True)
    out = g.agg(value=("value", "mean"), std=("value", "std"), n=("model", "nunique"),
                d_ff=("d_ff", "mean"), n_tokens=("n_tokens", "max")).reset_index()
    if len(members) == 1:
        ci = g.agg(ci_low=("ci_low", "first"), ci_high=("ci_high", "first")).reset_index(drop=True)
        return pd.concat([out, ci], axis=1)
    return out.assign(ci_low=np.nan, ci_high=np.nan)


def n_layers(rows: pd.DataFrame) -> dict[str, int]:
    """model -> number of layers in its per-layer rows (max layer index + 1)."""
    return (rows.groupby(rows["model"].astype(str))["layer"].max().astype(int) + 1).to_dict()


def titled_entries(rows: pd.DataFrame, groups: Mapping[str, list[str]]) -> tuple[list[str], list[float]]:
    """Each entry's name for a title ('cosine, 3 seeds') and the most tokens any of its models saw."""
    names = rows["model"].astype(str)
    labels = [f"{e}, {len(m)} seeds" if len(m) > 1 else e for e, m in groups.items()]
    return labels, [rows.loc[names.isin(m), "n_tokens"].max() for m in groups.values()]
