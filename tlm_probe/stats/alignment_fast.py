"""All alignment statistics of every layer of a batch from their dot products, in a few tensor operations.

FORMULAS (in statistic_names.py: plain data) is the one table of the alignment statistics
(stats.alignment.STATISTICS, the one-by-one reference path, is made from it). Each is a cosine, one minus
a cosine, or a ratio of norms of two pieces, so a layer needs only the dot products of a few pairs of
pieces (`Plan.pairs`: the squared norm of every piece read, then the cross terms). Evaluating the
statistics one by one costs ~60 small operations per layer, which on narrow models (64-384 wide) is a
visible share of the forward pass; here the dot products of all layers of a batch are stacked into one
(layers * pairs, n) table and every value is computed at once.
The arithmetic per value is the one-by-one formulas' (dot / clamp(|a||b|), -cos + 1 == 1 - cos exactly,
|a| / clamp(|b|)) on the same products, so the values are bitwise equal; a test checks it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from tlm_probe.statistic_names import FORMULAS  # the table is plain data, read at start-up too
from tlm_probe.stats.workspace import Workspace


@dataclass(frozen=True)
class Plan:
    """Which dot products one layer needs, and where each statistic reads them."""

    statistics: tuple[str, ...]
    pieces: tuple[str, ...]  # every piece read; pairs[j] = (pieces[j], pieces[j]) for j < len(pieces)
    pairs: tuple[tuple[str, str], ...]  # squared norms first, then the cross terms


@functools.lru_cache(maxsize=64)
def plan(statistics: tuple[str, ...]) -> Plan:
    specs = [FORMULAS[s] for s in statistics]
    pieces = sorted({p for _, a, b in specs for p in (a, b)})
    pairs = [(p, p) for p in pieces] + sorted({(a, b) for kind, a, b in specs if kind != "ratio"})
    return Plan(tuple(statistics), tuple(pieces), tuple(pairs))


def layer_values(
    dots: torch.Tensor, p: Plan, scratch: Workspace | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """dots (L * len(p.pairs), n) float64, layer after layer -> values (L * S, n) float64 and, for each row
    of values, its (layer position, statistic index) as an (L * S, 2) tensor. Rows come grouped by kind
    (cosines, |cosines|, one minus cosines, ratios), so each kind is one operation on a slice. The work is
    done in place in `scratch` buffers; the values are one of them, valid until its next use."""
    scratch = scratch or Workspace()
    layers, n = dots.shape[0] // len(p.pairs), dots.shape[1]
    ix = _indices(p, layers, dots.device)
    m = len(ix["num"])  # cosine rows; the ratios follow
    rows = len(ix["where"])

    def take(name, source, index):
        return torch.index_select(source, 0, index, out=scratch.get(name, (len(index), n), source))

    norms = take("norms", dots, ix["squares"]).sqrt_()  # (L * pieces, n)
    out, a, b = scratch.get("values", (rows, n), dots), take("a", norms, ix["a"]), take("b", norms, ix["b"])
    cos = torch.index_select(dots, 0, ix["num"], out=out[:m]).div_(a[:m].mul_(b[:m]).clamp_min_(1e-300))
    n_cos, n_abs = ix["counts"]
    cos[n_cos : n_cos + n_abs].abs_()
    cos[n_cos + n_abs :].neg_().add_(1)  # -cos + 1 == 1 - cos exactly
    torch.div(a[m:], b[m:].clamp_min_(1e-300), out=out[m:])
    return out, ix["where"]


_KIND_ORDER = ("cos", "|cos|", "1-cos", "ratio")


@functools.lru_cache(maxsize=64)
def _indices(p: Plan, layers: int, device: torch.device) -> dict:
    """Row indices over `layers` layers, built once per (plan, layers): the squared norms in `dots`, the
    cross terms of the cosine rows, each value row's a and b in the norms, and where each value row goes."""
    width, k = len(p.pairs), len(p.pieces)
    col = {pair: j for j, pair in enumerate(p.pairs)}
    piece = {name: j for j, name in enumerate(p.pieces)}
    kind_of = [_KIND_ORDER.index(FORMULAS[s][0]) for s in p.statistics]
    rows = sorted((kind_of[i], layer, i) for layer in range(layers) for i in range(len(p.statistics)))
    specs = [(kind, layer, FORMULAS[p.statistics[i]]) for kind, layer, i in rows]
    cosine = [(layer, a, b) for kind, layer, (_, a, b) in specs if _KIND_ORDER[kind] != "ratio"]
    counts = [sum(1 for kind, _, _ in rows if _KIND_ORDER[kind] == name) for name in _KIND_ORDER]
    t = lambda values: torch.tensor(values, dtype=torch.long, device=device)  # noqa: E731
    return {
        "squares": t([layer * width + j for layer in range(layers) for j in range(k)]),
        "num": t([layer * width + col[(a, b)] for layer, a, b in cosine]),
        "a": t([layer * k + piece[a] for _, layer, (_, a, _) in specs]),
        "b": t([layer * k + piece[b] for _, layer, (_, _, b) in specs]),
        "counts": (counts[0], counts[1]),  # cosines, |cosines|; then 1 - cosines, then ratios
        "where": torch.tensor([(layer, i) for _, layer, i in rows], dtype=torch.long),  # metadata: on the CPU
    }
