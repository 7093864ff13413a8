"""Interventions on named pieces: zero, mean, patch, add, or a user function, through hooks removed on exit.

An edit rewrites the tensor at the piece's tap (capture/names.py `editable`): a module output (what the
block adds: attn_out, mlp_out; what it passes on: resid_post) or the input of the module that reads it
(the layer: resid_pre; the MLP: mlp_in). The edit sees the piece as the probe captures it, (B, T, d) and
times the row's scale (Granite), and the module gets back the edited piece divided by that scale, so that
`zero` of mlp_out is the same as an MLP that returns zeros, and `add(v)` adds exactly v to the stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import torch

from tlm_probe.capture.names import check_layers, check_names, editable
from tlm_probe.capture.native import tap_input
from tlm_probe.capture.probe_model import in_block
from tlm_probe.capture.rows import split_tap
from tlm_probe.errors import UserError

if TYPE_CHECKING:
    from tlm_probe.capture.cache import Cache


@dataclass(frozen=True)
class Edit:
    """What to write in place of a piece: `kind` (a key of RULES) and what it reads (a cache, a vector,
    a function)."""

    kind: str
    source: Any = None


EditLike: TypeAlias = Edit | str | Callable[[torch.Tensor], torch.Tensor]
"""An edit as Handle.hooks takes it: an Edit, "zero", or a function of the (B, T, d) piece (apply)."""
# The key is Any, not tuple[str, int | Sequence[int]]: a Mapping's key type is invariant, so a user's
# dict[tuple[str, int], Edit] would not match the wider key. parse_edits checks every key.
Edits: TypeAlias = Mapping[Any, EditLike] | Sequence[tuple[Any, EditLike]]
"""{(name, layer or layers): edit}, or [((name, layers), edit), ...]: layers an int, or a tuple, range or
list of ints. Every name and layer is checked before any hook is set."""


def zero() -> Edit:
    """Replace the piece by zeros (a zero ablation)."""
    return Edit("zero")


def mean(cache: Cache) -> Edit:
    """Replace the piece at every position by its mean over the unpadded tokens of `cache` (another run's
    Cache holding the same name and layer): a mean ablation."""
    return Edit("mean", cache)


def patch(cache: Cache) -> Edit:
    """Replace the piece by the same piece of another run (`cache`, same batch shape): activation patching."""
    return Edit("patch", cache)


def add(vector: torch.Tensor | np.ndarray | Sequence[float]) -> Edit:
    """Add `vector` ((d,), or anything broadcasting to (B, T, d)) to the piece: steering."""
    try:
        tensor: torch.Tensor | None = torch.as_tensor(vector)
    except (TypeError, ValueError, RuntimeError):
        tensor = None
    if tensor is None or tensor.dtype == torch.bool or tensor.is_complex():
        raise UserError("add() takes a vector of numbers (a tensor, an array or a list; (d,) for every "
                        "position)") from None
    return Edit("add", tensor)


def apply(fn: Callable[[torch.Tensor], torch.Tensor]) -> Edit:
    """Replace the piece x (B, T, d) by fn(x) (same shape)."""
    if not callable(fn):
        raise UserError(f"apply() takes a function of the (B, T, d) piece, not {type(fn).__name__}")
    return Edit("apply", fn)


def _cached(edit: Edit, key, x: torch.Tensor) -> torch.Tensor:
    if key not in edit.source:
        raise UserError(f"the cache given to {edit.kind}() has no {key}: run_with_cache it with that piece")
    value = edit.source.mean(*key) if edit.kind == "mean" else edit.source[key]
    if edit.kind == "patch" and value.shape != x.shape:
        raise UserError(f"patch of {key}: the cache holds {tuple(value.shape)}, this run {tuple(x.shape)}; "
                        "patch runs of the same batch shape")
    return value.to(device=x.device, dtype=x.dtype)


def _vector(edit: Edit, key, x: torch.Tensor) -> torch.Tensor:
    """add()'s vector, refused in one line where it does not broadcast to the piece."""
    vector = torch.as_tensor(edit.source).to(device=x.device, dtype=x.dtype)
    try:
        torch.broadcast_shapes(vector.shape, x.shape)
    except RuntimeError:
        raise UserError(f"add() to {key}: a vector of shape {tuple(vector.shape)} does not broadcast to the "
                        f"piece's {tuple(x.shape)} (give ({x.shape[-1]},) for every position)") from None
    return vector


# kind -> (piece (B, T, d), the Edit, its (name, layer)) -> the piece to write
RULES: dict[str, Callable[[torch.Tensor, Edit, tuple[str, int]], torch.Tensor]] = {
    "zero": lambda x, e, key: torch.zeros_like(x),
    # copies: a model may add into the tensor it gets back in place (Falcon), which must not be the cache's
    "mean": lambda x, e, key: _cached(e, key, x).expand_as(x).clone(),
    "patch": lambda x, e, key: _cached(e, key, x).clone(),
    "add": lambda x, e, key: x + _vector(e, key, x),
    "apply": lambda x, e, key: e.source(x),
}
SHORTHANDS = {"zero": zero}


def as_edit(value: EditLike) -> Edit:
    """An Edit, "zero", or a function (apply)."""
    if isinstance(value, Edit):
        return value
    if isinstance(value, str) and value in SHORTHANDS:
        return SHORTHANDS[value]()
    if callable(value):
        return apply(value)
    raise UserError(f"an edit is zero(), mean(cache), patch(cache), add(vector), apply(fn), \"zero\" or a "
                    f"function, not {type(value).__name__}")


def parse_edits(pm, edits: Edits) -> list[tuple[str, int, Edit]]:
    """{(name, layer or layers): edit}, or [((name, layers), edit), ...] where layers may be a list ->
    [(name, layer, Edit)], every name and layer checked first."""
    out = []
    for key, value in edits.items() if isinstance(edits, Mapping) else edits:
        if not (isinstance(key, tuple) and len(key) == 2):
            raise UserError(f"an edit's key is (name, layer), e.g. (\"mlp_out\", 5), not {key!r}")
        name = check_names(pm, [key[0]])[0]
        editable(pm, name)
        out += [(name, layer, as_edit(value)) for layer in check_layers(pm, key[1])]
    return out


class _Shape:
    """The batch's (B, T), read off layer 0's input as each forward starts (OPT flattens tokens inside)."""

    bt: tuple[int, int] = (0, 0)

    def record(self, module, args, kwargs) -> None:
        x = tap_input(args, kwargs)
        self.bt = tuple(x.shape[:2]) if x is not None and x.ndim >= 3 else self.bt


@contextlib.contextmanager
def hooked(pm, edits: list[tuple[str, int, Edit]]):
    """Inside, every forward of pm.model carries the edits; on exit (error or not) every hook is removed."""
    shape = _Shape()
    with contextlib.ExitStack() as stack:
        stack.callback(pm.layer(0).register_forward_pre_hook(shape.record, with_kwargs=True).remove)
        for name, layer, edit in edits:
            path, where = split_tap(editable(pm, name))
            module = in_block(pm.layer(layer), path)
            rewrite = _rewriter(edit, (name, layer), pm.scales.get(name, 1.0), shape)
            if where == "in":
                handle = module.register_forward_pre_hook(
                    lambda m, a, k, f=rewrite: _new_input(a, k, f), with_kwargs=True)
            else:
                handle = module.register_forward_hook(lambda m, a, o, f=rewrite: _new_output(o, f))
            stack.callback(handle.remove)
        yield


def _rewriter(edit: Edit, key: tuple, scale: float, shape: _Shape):
    """tensor at the tap -> the edited tensor at the tap, the rule applied to the (B, T, ...) piece."""
    rule = RULES[edit.kind]

    def rewrite(x: torch.Tensor) -> torch.Tensor:
        flat = x.ndim == 2 and x.shape[0] == shape.bt[0] * shape.bt[1]
        piece = x.view(*shape.bt, -1) if flat else x
        new = rule(piece * scale if scale != 1.0 else piece, edit, key)
        if not isinstance(new, torch.Tensor):  # a function of the user's that forgot to return
            raise UserError(f"the edit of {key} returned {type(new).__name__}, not a tensor")
        if tuple(new.shape) != tuple(piece.shape):
            raise UserError(f"the edit of {key} gave shape {tuple(new.shape)}, not {tuple(piece.shape)}")
        new = new / scale if scale != 1.0 else new
        return new.reshape(x.shape).to(x.dtype)

    return rewrite


def _new_output(out, rewrite):
    if isinstance(out, torch.Tensor):
        return rewrite(out)
    if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
        return (rewrite(out[0]), *out[1:])
    raise UserError(f"cannot edit a module output of type {type(out).__name__}")


def _new_input(args: tuple, kwargs: dict, rewrite):
    if args and isinstance(args[0], torch.Tensor):
        return (rewrite(args[0]), *args[1:]), kwargs
    tensors = [k for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    key = "hidden_states" if "hidden_states" in tensors else next(iter(tensors), None)
    if key is None:
        raise UserError("cannot edit a module input that holds no tensor")
    return args, {**kwargs, key: rewrite(kwargs[key])}
