"""The contract's piece names as the public API offers them, and where each comes from on one model.

Every name means the same on every family (DESIGN.md section 2); the adapter row says where it is:

    resid_pre    the layer's input (the residual stream before the block)
    attn_out     what the token mixer adds to the stream (after its own output norm or multiplier)
    resid_mid    the stream the MLP output is added to (parallel blocks: resid_pre + attn_out; post-LN
                 blocks: the normalised stream after attention)
    mlp_in       what the MLP reads: the first input of the row's MLP module (after its norm); post-LN
                 blocks: resid_mid itself
    mlp_out      what the MLP adds to the stream
    resid_post   the layer's output
    pattern      the attention weights (B, H, T, T), where the row maps them

A name a model cannot give (a block without an MLP has no mlp_in, mlp_out or resid_mid; a row whose MLP
entry is its down projection alone has no module that reads the MLP's input) is refused with its reason.
Nothing here knows a family: it reads the row's taps, block kind and MLP paths.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from tlm_probe.capture.guardrails import DERIVED, NO_MLP
from tlm_probe.capture.rows import MIXER_ONLY, POST_LN, split_tap
from tlm_probe.errors import UserError

Names: TypeAlias = str | Sequence[str] | None
"""A piece's name or several (None: every piece the model gives but pattern)."""
Layers: TypeAlias = int | Sequence[int] | None
"""A layer, or several (a list, tuple, range or 1-D array; negative counts from the end; None: all)."""

NAMES = ("resid_pre", "attn_out", "resid_mid", "mlp_in", "mlp_out", "resid_post", "pattern")
PATTERN = "pattern"
NO_MLP_IN = ("the row's MLP entry is its down projection alone: no module of this block receives the MLP's "
             "input")


@dataclass(frozen=True)
class Source:
    """Where one name comes from: a tap ("path:in|out"), a sum of other pieces, or another piece."""

    tap: str | None = None
    terms: tuple[str, ...] = ()
    same_as: str | None = None


def sources(pm) -> tuple[dict[str, Source], dict[str, str]]:
    """({name: Source} the model gives, {name: why not} the others) for a ProbeModel."""
    taps, kind = pm.taps(), pm.block_kind
    given: dict[str, Source] = {p: Source(tap=t) for p, t in taps.items() if p in NAMES}
    given |= {p: Source(terms=terms) for p, terms in DERIVED.get(kind, {}).items() if p in NAMES}
    refused: dict[str, str] = {}
    mlp_in = _mlp_in(pm)
    if isinstance(mlp_in, Source):
        given["mlp_in"] = mlp_in
    else:
        refused["mlp_in"] = mlp_in
    if pm.adapter.pattern:
        given[PATTERN] = Source(tap=pm.adapter.pattern)
    else:
        refused[PATTERN] = f"the {pm.family} row maps no softmax attention"
    for name in NAMES:
        if name not in given and name not in refused:
            refused[name] = NO_MLP if kind == MIXER_ONLY else f"the {pm.family} row has no tap for it"
    return given, refused


def _mlp_in(pm) -> Source | str:
    """mlp_in's Source, or why there is none."""
    row = pm.adapter
    if row.mlp is None or pm.block_kind == MIXER_ONLY:
        return NO_MLP
    if pm.block_kind == POST_LN:  # the MLP reads the normalised stream after attention, resid_mid
        return Source(same_as="resid_mid")
    if row.mlp == row.mlp_down:
        return NO_MLP_IN
    return Source(tap=f"{row.mlp}:in")


def check_names(pm, names: Names) -> tuple[str, ...]:
    """The asked names (all the model gives when None), each known and given, else one UserError line."""
    given, refused = sources(pm)
    if names is None:
        return tuple(n for n in NAMES if n in given and n != PATTERN)
    one = (names,) if isinstance(names, str) else names
    names = _sequence(one, "names is a piece's name or a list of them")
    for n in names:
        if not isinstance(n, str) or n not in NAMES:
            raise UserError(f"unknown piece {n!r}; the pieces are {', '.join(NAMES)}")
        if n in refused:
            raise UserError(f"{pm.name} ({pm.family}) has no {n}: {refused[n]}")
    return names


def _sequence(values, what: str) -> tuple:
    """A list, tuple or range as a tuple (a 1-D array or tensor: its items); anything else a UserError."""
    if hasattr(values, "tolist") and getattr(values, "ndim", None) == 1:
        values = values.tolist()
    if not isinstance(values, list | tuple | range):
        raise UserError(f"{what}, not {type(values).__name__}")
    return tuple(values)


def check_layers(pm, layers: Layers) -> tuple[int, ...]:
    """The asked layers (all when None; negative counts from the end), each in range."""
    if layers is None:
        return tuple(range(pm.n_layers))
    one = isinstance(layers, numbers.Integral) and not isinstance(layers, bool)
    asked = (layers,) if one else _sequence(layers, "layers is a layer or a list of layers")
    out = []
    for layer in asked:
        if isinstance(layer, bool) or not isinstance(layer, numbers.Integral):  # 0.5 is no layer, True no 1
            raise UserError(f"a layer is an integer, not {layer!r}")
        if not -pm.n_layers <= int(layer) < pm.n_layers:
            raise UserError(f"layer {layer} is out of range: {pm.name} has {pm.n_layers} layers")
        out.append(int(layer) % pm.n_layers)
    return tuple(dict.fromkeys(out))


def editable(pm, name: str) -> str:
    """The tap an intervention on `name` rewrites, or a UserError saying why it cannot be edited there.

    A module output can be replaced (what the block then adds or passes on is the edit); a module input can
    be when the module reading it is what the name means: the layer (resid_pre) or the MLP (mlp_in). A
    resid_mid read at the input of the MLP's norm cannot: the block adds the MLP output to its own copy of
    the stream, so an edit there would reach the MLP only; edit attn_out or resid_pre instead."""
    given, _ = sources(pm)
    source = given.get(name)
    if source is None or source.tap is None:
        how = f"the same tensor as {source.same_as}" if source and source.same_as else "a sum of other pieces"
        raise UserError(f"{name} of {pm.name} ({pm.family}) is {how}; edit that instead")
    path, where = split_tap(source.tap)
    # "weights": a copy the attention module returns after using it, so an edit would change nothing
    if not {"out": True, "in": path == "" or name == "mlp_in"}.get(where, False):
        raise UserError(f"{name} of {pm.name} ({pm.family}) is read at {source.tap!r}, where an edit would "
                        "not reach the stream; edit attn_out, mlp_out, resid_pre or resid_post instead")
    return source.tap
