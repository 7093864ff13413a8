"""Schedules for attention heads and key/value heads under an exact budget (the MLP's machinery, applied
to another per-layer integer). Pure: imports no model code.

Query heads (component "heads"): the unit is one GQA group, g = n_heads / kv_heads query heads sharing one
key/value head. Layer l gets u_l groups, h_l = g·u_l, by the same shapes, grouped controls, zoo, explicit
counts and schedule files as the MLP widths (schedules/widths.py: largest remainder, so Σ h_l = L·n_heads
exactly). Alone, a heads schedule keeps the group size: kv_l = u_l (so Σ kv_l = L·kv_heads too; plain
multi-head attention stays multi-head, every query head with its own key/value head).

Key/value heads (component "kv"): Σ kv_l = L·kv_heads and kv_l divides h_l. The schedule's integer
counts (multiple_of 1) are used as they are when every one divides its layer's heads; otherwise each is
moved to a divisor of h_l by an exact search (least squared distance to the unrounded targets, the sum
kept, the targets' monotone direction kept). When no such counts exist, the request is refused: exact
parity is impossible at that rounding (a one-line ScheduleError, never a silently different budget); so is
a taper that only uniform's counts can satisfy (multi-head attention: kv_l <= h_l = n_heads = kv_heads).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from tlm_probe.registry import Registry
from tlm_probe.schedules.widths import (
    FILE,
    SCHEDULES,
    ScheduleError,
    ScheduleSpec,
    _check_inputs,
    monotone_label,
    parse_schedule,
    shape_widths,
)

COMPONENTS: Registry[str] = Registry("component", {
    "mlp": "MLP width d_l", "heads": "query heads h_l", "kv": "key/value heads kv_l",
    "mem": "a mixer's own per-layer count (its row's component, models/mixer_registry.py)"},
    error=ScheduleError)
"""What a schedule can taper (layer_counts makes the per-layer values)."""


def split_components(text: str) -> dict[str, str]:
    """An arm's schedule text -> {component: spec}: 'cosine:1.5:0.5' is the MLP's; 'heads=cosine:1.5:0.5'
    or 'mlp=cosine+kv=linear:1.5:0.5' name their components (two tapered at once)."""
    if "=" not in text:
        return {"mlp": text}
    out: dict[str, str] = {}
    for part in text.split("+"):
        name, sep, spec = part.partition("=")
        name, spec = name.strip(), spec.strip()
        if not sep or name not in COMPONENTS or not spec:
            raise ScheduleError(f"{part!r} in {text!r}: write COMPONENT=SPEC with COMPONENT one of "
                                f"{', '.join(COMPONENTS)}, joined by '+'")
        if name in out:
            raise ScheduleError(f"{text!r} names the component {name} twice")
        out[name] = spec
    return out


def layer_counts(spec: ScheduleSpec, n_layers: int, total: int, unit: int, what: str) -> list[int]:
    """Per-layer counts (multiples of `unit`) summing to n_layers·total, each >= 1 unit."""
    spec = replace(spec, multiple_of=unit)
    _check_inputs(spec, n_layers, total)
    counts = shape_widths(spec, n_layers, total, allow_zero=True)
    if min(counts) < 1:
        layer = counts.index(min(counts))
        raise ScheduleError(f"{what} schedule {spec.name}: layer {layer} would get {counts[layer]} {what} "
                            f"(at a unit of {unit}); exact parity with {total} per layer is impossible "
                            "here: use a milder schedule or more heads")
    bad = [c for c in counts if c % unit]
    if bad:
        raise ScheduleError(f"{what} schedule: {bad[0]} {what} is not a multiple of {unit}")
    return counts


def head_counts(spec: ScheduleSpec | str, n_layers: int, n_heads: int, kv_heads: int) -> tuple[list, list]:
    """(h_l, kv_l) of a query-heads schedule: h_l = g·u_l, kv_l = u_l, g = n_heads / kv_heads."""
    spec = parse_schedule(spec) if isinstance(spec, str) else spec
    group = n_heads // kv_heads
    heads = layer_counts(spec, n_layers, n_heads, group, "query heads")
    return heads, [h // group for h in heads]


def kv_counts(spec: ScheduleSpec | str, heads: list[int], kv_heads: int) -> list[int]:
    """kv_l of a key/value-heads schedule, each dividing heads[l], Σ kv_l = L·kv_heads exactly."""
    spec = parse_schedule(spec) if isinstance(spec, str) else spec
    targets = layer_counts(spec, len(heads), kv_heads, 1, "key/value heads")
    if all(h % k == 0 for h, k in zip(heads, targets, strict=True)):
        return targets
    if spec.name in ("explicit", FILE):  # the user's own numbers: refuse, do not move them
        layer = next(i for i, (h, k) in enumerate(zip(heads, targets, strict=True)) if h % k)
        raise ScheduleError(f"key/value heads schedule: layer {layer} has {targets[layer]} key/value heads, "
                            f"which do not divide its {heads[layer]} query heads")
    build = SCHEDULES.get(spec.name).build
    shape = build(spec, len(heads)) if build is not None else targets
    ideal = tuple(x / (sum(shape) / len(shape)) * kv_heads for x in shape)  # the unrounded targets
    snapped = _snap(tuple(heads), ideal, len(heads) * kv_heads)
    if len(set(snapped)) == 1 and len(set(targets)) > 1:  # exact, but the taper is gone: say so
        raise ScheduleError(f"key/value heads schedule {spec.name}: the only counts that divide the layers' "
                            f"query heads and keep the total are uniform's ({snapped[0]} per layer); a "
                            "key/value head cannot serve a fraction of a query head: use grouped-query "
                            "attention (fewer key/value heads than query heads) or taper the query heads too")
    return snapped


def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


MAX_SNAP_LAYERS = 256
"""The deepest model whose key/value-head counts are searched exactly (real models have <= ~128 layers)."""


def _snap(heads: tuple[int, ...], targets: tuple[float, ...], total: int) -> list[int]:
    """Divisors k_l of heads[l], Σ k_l = total, closest to targets (least squares), keeping the targets'
    monotone direction; exact search over (layer, remaining sum, previous count)."""
    L = len(heads)
    if L > MAX_SNAP_LAYERS:  # the exact search recurses once per layer
        raise ScheduleError(f"key/value head schedules are searched exactly for at most {MAX_SNAP_LAYERS} "
                            f"layers; got {L}")
    label = monotone_label(targets)
    down, up = label.startswith("non-increasing"), label.startswith("non-decreasing")

    @cache
    def best(l: int, left: int, prev: int) -> tuple[float, tuple[int, ...]] | None:
        if l == L:
            return (0.0, ()) if left == 0 else None
        out = None
        for k in _divisors(heads[l]):
            if k > left or (down and prev and k > prev) or (up and k < prev):
                continue
            rest = best(l + 1, left - k, k)
            if rest is not None:
                cost = (k - targets[l]) ** 2 + rest[0]
                if out is None or cost < out[0]:
                    out = (cost, (k, *rest[1]))
        return out

    found = best(0, total, 0)
    if found is None:
        raise ScheduleError(f"key/value heads: no counts dividing the layers' query heads {list(heads)} "
                            f"sum to {total} (uniform's total) with the schedule's shape; exact parity is "
                            "impossible at this rounding")
    return list(found[1])
